// Helpers shared by the subcommands: parsing id lists, building an engine, writing JSON.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "runtime/engine.h"

namespace tide::cli {

// Parses "5,17,42" (spaces allowed). Throws tide::Error naming `flag` on anything else.
std::vector<int32_t> parse_ids(const std::string& text, const std::string& flag);
// The backend named by --device: "cpu", "cuda", or "auto" (cuda when this build has it and a GPU is present).
std::unique_ptr<Backend> make_backend(const std::string& device);
// The engine's flags, shared by the commands that load one (generate, serve): the device, KV cache, batching,
// graphs, quantization, --max-model-len.
struct EngineFlags {
  std::string device = "auto";
  EngineOptions options;
  bool no_prefix_caching = false;
};
// Registers EngineFlags' options on `cmd`; `flags` must outlive the parse.
void add_engine_flags(CLI::App* cmd, EngineFlags& flags);
// The EngineOptions the flags ask for.
EngineOptions engine_options(const EngineFlags& flags);
// Prints `j` on one line; invalid UTF-8 inside strings is replaced, never an exception.
void print_json(const nlohmann::json& j);
// Tells stderr when `tokenizer` is the stand-in of a folder without tokenizer files (Tokenizer::stand_in), whose
// text is not the model's; does nothing otherwise.
void note_stand_in_tokenizer(const Tokenizer& tokenizer, const std::string& model);

}  // namespace tide::cli
