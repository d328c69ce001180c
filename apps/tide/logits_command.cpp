// tide logits: the model's logits for a prompt (last position, or every position), through the same
// chunked, paged engine path as generation. Values are printed as the shortest decimal that reads back
// as the same float32.
#include <cmath>
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "apps/tide/cli_util.h"
#include "apps/tide/commands.h"

namespace tide::cli {
namespace {

struct LogitsArgs {
  std::string model;
  std::string prompt_ids;
  std::string device = "auto";
  int64_t block_size = 16;
  bool all_positions = false;
};

void run_logits(const LogitsArgs& args) {
  EngineOptions options;
  options.block_size = args.block_size;
  Engine engine(args.model, make_backend(args.device), options);
  const auto logits = engine.prompt_logits(parse_ids(args.prompt_ids, "--prompt-ids"), args.all_positions);
  std::string out = "{\"logits\": [";
  for (size_t r = 0; r < logits.size(); ++r) {
    out += r ? ", [" : "[";
    for (size_t i = 0; i < logits[r].size(); ++i) {
      if (i) out += ", ";
      const float v = logits[r][i];
      out += std::isfinite(v) ? fmt::format("{}", v) : "null";
    }
    out += "]";
  }
  out += "]}";
  std::cout << out << std::endl;
}

}  // namespace

void add_logits_command(CLI::App& app) {
  auto args = std::make_shared<LogitsArgs>();
  CLI::App* cmd = app.add_subcommand("logits", "Print the logits of a prompt as JSON {\"logits\": [[...], ...]}");
  cmd->add_option("--model", args->model, "Hugging Face model folder")->required()->check(CLI::ExistingDirectory);
  cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt token ids, comma-separated")
      ->required()
      ->check(not_empty("give token ids separated by commas, e.g. 5,17,42"));
  cmd->add_flag("--all-positions", args->all_positions, "Logits of every position, not only the last");
  cmd->add_option("--block-size", args->block_size, "Positions per KV cache block")
      ->capture_default_str()
      ->check(power_of_two_at_most(kMaxBlockSizeFlag));
  cmd->add_option("--device", args->device, "Where to run: cpu, cuda, or auto (cuda when a GPU is present)")
      ->capture_default_str()
      ->check(one_of({"cpu", "cuda", "auto"}));
  cmd->callback([args] { run_logits(*args); });
}

}  // namespace tide::cli
