// Subcommands of the tide program; each registers its flags and a callback that does the work.
#pragma once

#include <CLI/CLI.hpp>

namespace tide::cli {

void add_generate_command(CLI::App& app);
void add_logits_command(CLI::App& app);
void add_tokenize_commands(CLI::App& app);  // tokenize and detokenize
void add_serve_command(CLI::App& app);      // the OpenAI-compatible server (src/server)
void add_quantize_command(CLI::App& app);   // an FP8 copy of a model folder
void add_bench_command(CLI::App& app);      // bench serve: a serving benchmark against a running server

}  // namespace tide::cli
