// Subcommands of the tide program; each registers its flags and a callback that does the work.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace tide::cli {

// Wraps the backend `serve` builds its engine on, given the model folder (the server tests' scripted output);
// empty: the backend as made.
using BackendWrapper = std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>, const std::string& model_dir)>;

void add_generate_command(CLI::App& app);
void add_logits_command(CLI::App& app);
void add_tokenize_commands(CLI::App& app);  // tokenize and detokenize
void add_serve_command(CLI::App& app, BackendWrapper wrap = {});  // the OpenAI-compatible server (src/server)
void add_quantize_command(CLI::App& app);   // an FP8 copy of a model folder
void add_bench_command(CLI::App& app);      // bench serve: a serving benchmark against a running server

}  // namespace tide::cli
