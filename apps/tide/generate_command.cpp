// tide generate: complete one prompt (text or ids) with the model, printing the text as it is produced,
// or one JSON object with --json.
#include <iostream>
#include <memory>

#include "apps/tide/cli_util.h"
#include "apps/tide/commands.h"
#include "core/error.h"
#include "tokenizer/streaming_decoder.h"

namespace tide::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  std::string device = "cpu";
  int64_t max_tokens = 32;
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 0;
  int64_t block_size = 16;
  bool ignore_eos = false;
  bool json = false;
};

void run_generate(const GenerateArgs& args, const CLI::App& cmd) {
  EngineOptions options;
  options.block_size = args.block_size;
  Engine engine(args.model, make_backend(args.device), options);

  const std::vector<int32_t> prompt_ids =
      args.prompt_ids.empty() ? engine.tokenizer().encode(args.prompt) : parse_ids(args.prompt_ids, "--prompt-ids");
  GenerateOptions gen;
  gen.max_tokens = args.max_tokens;
  gen.ignore_eos = args.ignore_eos;
  gen.sampling.temperature = args.temperature;
  gen.sampling.top_k = args.top_k;
  gen.sampling.top_p = args.top_p;
  if (cmd.count("--seed") > 0) gen.sampling.seed = args.seed;

  if (args.json) {
    const GenerateResult result = engine.generate(prompt_ids, gen);
    print_json({{"prompt_ids", prompt_ids},
                {"ids", result.ids},
                {"text", engine.tokenizer().decode(result.ids, /*skip_special_tokens=*/true)},
                {"finish_reason", result.finish_reason}});
    return;
  }
  // Plain mode: the prompt, then the continuation streamed as whole UTF-8 characters.
  std::cout << engine.tokenizer().decode(prompt_ids, /*skip_special_tokens=*/true) << std::flush;
  StreamingDecoder decoder(engine.tokenizer(), /*skip_special_tokens=*/true);
  engine.generate(prompt_ids, gen, [&](int32_t id) { std::cout << decoder.push(id) << std::flush; });
  std::cout << decoder.finish() << std::endl;
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a continuation of a prompt");
  cmd->add_option("--model", args->model, "Hugging Face model folder (config.json, *.safetensors, tokenizer.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  auto* text = cmd->add_option("--prompt", args->prompt, "Prompt text (tokenized with BOS)");
  auto* ids = cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt token ids, comma-separated");
  text->excludes(ids);
  cmd->add_option("--max-tokens", args->max_tokens, "Maximum number of tokens to generate")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", args->temperature, "Sampling temperature; 0 is greedy")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", args->top_k, "Keep the k most likely tokens (0: off)")->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "Keep the smallest set of tokens with this probability mass")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", args->seed, "Seed of the sampler (reproducible sampling)");
  cmd->add_option("--block-size", args->block_size, "Positions per KV cache block")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--device", args->device, "Where to run: cpu")->capture_default_str();
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating after an end-of-sequence token");
  cmd->add_flag("--json", args->json, "Print one JSON object {prompt_ids, ids, text, finish_reason}");
  cmd->callback([args, cmd] {
    if (args->prompt.empty() && args->prompt_ids.empty()) fail("generate: give --prompt or --prompt-ids");
    run_generate(*args, *cmd);
  });
}

}  // namespace tide::cli
