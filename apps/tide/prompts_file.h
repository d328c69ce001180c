// Reading `--prompts-file`: JSON Lines, one prompt per line, {"prompt_ids": [...]} or {"prompt": "..."},
// each with an optional "max_tokens". Blank lines are skipped. The file is untrusted input.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tide::cli {

struct PromptSpec {
  std::optional<std::vector<int32_t>> ids;  // "prompt_ids"
  std::string text;                         // "prompt", when ids are absent
  std::optional<int64_t> max_tokens;
};

// Throws tide::Error naming the file, the line and the field on anything malformed.
std::vector<PromptSpec> read_prompts_file(const std::filesystem::path& path);

}  // namespace tide::cli
