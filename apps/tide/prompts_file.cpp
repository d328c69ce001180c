#include "apps/tide/prompts_file.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tide::cli {

std::vector<PromptSpec> read_prompts_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) fail("--prompts-file: cannot open {}", path.string());
  std::vector<PromptSpec> prompts;
  std::string line;
  for (int64_t line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto where = [&] { return fmt::format("{}:{}", path.string(), line_no); };
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) fail("{}: not a JSON object", where());
    PromptSpec spec;
    const bool has_ids = j.contains("prompt_ids"), has_text = j.contains("prompt");
    if (has_ids == has_text) fail("{}: give exactly one of \"prompt_ids\" and \"prompt\"", where());
    if (has_ids) {
      const nlohmann::json& ids = j.at("prompt_ids");
      if (!ids.is_array()) fail("{}: \"prompt_ids\" must be a list of token ids", where());
      spec.ids.emplace();
      for (const nlohmann::json& id : ids) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
          fail("{}: \"prompt_ids\" holds {}, not a token id", where(), id.dump());
        }
        spec.ids->push_back(id.get<int32_t>());
      }
    } else {
      if (!j.at("prompt").is_string()) fail("{}: \"prompt\" must be a string", where());
      spec.text = j.at("prompt").get<std::string>();
    }
    if (j.contains("max_tokens")) {
      const nlohmann::json& m = j.at("max_tokens");
      if (!m.is_number_integer() || m.get<int64_t>() < 0) fail("{}: \"max_tokens\" must be an integer >= 0", where());
      spec.max_tokens = m.get<int64_t>();
    }
    prompts.push_back(std::move(spec));
  }
  if (prompts.empty()) fail("--prompts-file: {} holds no prompt", path.string());
  return prompts;
}

}  // namespace tide::cli
