// Helpers shared by the subcommands: parsing id lists, building an engine, writing JSON.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/engine.h"

namespace tide::cli {

// Parses "5,17,42" (spaces allowed). Throws tide::Error naming `flag` on anything else.
std::vector<int32_t> parse_ids(const std::string& text, const std::string& flag);
// The backend named by --device: "cpu", "cuda", or "auto" (cuda when this build has it and a GPU is present).
std::unique_ptr<Backend> make_backend(const std::string& device);
// Prints `j` on one line; invalid UTF-8 inside strings is replaced, never an exception.
void print_json(const nlohmann::json& j);

}  // namespace tide::cli
