// tide generate: complete prompts (text, ids, or a file of them run one after another in one engine, or all
// at once with --concurrent: continuous batching), printing the text as it is produced, or one JSON object
// per prompt with --json.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "apps/tide/cli_util.h"
#include "apps/tide/commands.h"
#include "apps/tide/prompts_file.h"
#include "core/error.h"
#include "tokenizer/streaming_decoder.h"

namespace tide::cli {
namespace {

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string prompt_ids;
  std::string prompts_file;
  EngineFlags engine;
  int64_t max_tokens = 32;
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  double repetition_penalty = 1.0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  int64_t min_tokens = 0;
  int logprobs = -1;
  int n = 1;
  bool json = false;
  bool concurrent = false;
};

// {"block_size": B, "block_bytes", "capacity_blocks", "host_capacity_blocks", "in_use_blocks",
// "cached_blocks", "peak_in_use_blocks", "groups": [{"window": W or null, "num_layers", "in_use_blocks", ...}]}:
// the arena, then each layer group's share of it. Outside scripts parse these names.
nlohmann::json kv_json(const Engine& engine) {
  const KvReport report = engine.kv_report();
  nlohmann::json groups = nlohmann::json::array();
  for (const KvGroupReport& r : report.groups) {
    groups.push_back({{"window", r.window == 0 ? nlohmann::json(nullptr) : nlohmann::json(r.window)},
                      {"num_layers", r.num_layers},
                      {"in_use_blocks", r.stats.in_use_blocks},
                      {"cached_blocks", r.stats.cached_blocks},
                      {"host_blocks", r.stats.host_blocks},
                      {"peak_in_use_blocks", r.stats.peak_in_use_blocks},
                      {"queries", r.stats.queries},
                      {"hits", r.stats.hits}});
  }
  const ArenaStats& a = report.arena;
  return {{"block_size", report.block_size},
          {"block_bytes", report.block_bytes},
          {"capacity_blocks", a.capacity_blocks},
          {"host_capacity_blocks", a.host_capacity_blocks},
          {"in_use_blocks", a.in_use_blocks},
          {"cached_blocks", a.cached_blocks},
          {"peak_in_use_blocks", a.peak_in_use_blocks},
          {"groups", groups}};
}

nlohmann::json logprobs_json(const std::vector<TokenLogprobs>& logprobs) {
  nlohmann::json out = nlohmann::json::array();
  for (const TokenLogprobs& lp : logprobs) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [id, value] : lp.top) top.push_back({{"id", id}, {"logprob", value}});
    out.push_back({{"id", lp.id}, {"logprob", lp.logprob}, {"top", top}});
  }
  return out;
}

nlohmann::json sample_json(const SampleResult& r, bool logprobs) {
  nlohmann::json j = {{"ids", r.ids}, {"text", r.text}, {"finish_reason", r.finish_reason}};
  if (r.finish_reason == "error") j["error"] = r.error;
  if (logprobs) j["logprobs"] = logprobs_json(r.logprobs);
  return j;
}

// {prompt_ids, ids, text, finish_reason, cached_tokens, kv, engine} of sample 0 ("engine": its steps and
// their seconds so far), with "logprobs" when asked for,
// "samples" (each {ids, text, finish_reason}) when n > 1, "speculative" (the engine's drafted and accepted
// tokens and verifications so far; with a draft model also its steps and their seconds) with
// --speculative-config, and "seconds" (the request's wall time, prompt
// to last token) when the prompts run one after another.
void print_result_json(const Engine& engine, const std::vector<int32_t>& prompt_ids, const GenerateResult& result,
                       const GenerateOptions& gen, std::optional<double> seconds = std::nullopt) {
  nlohmann::json j = sample_json(result, gen.logprobs >= 0);
  if (seconds) j["seconds"] = *seconds;
  j["prompt_ids"] = prompt_ids;
  j["cached_tokens"] = result.cached_tokens;
  if (result.samples.size() > 1) {
    j["samples"] = nlohmann::json::array();
    for (const SampleResult& s : result.samples) j["samples"].push_back(sample_json(s, gen.logprobs >= 0));
  }
  j["kv"] = kv_json(engine);
  const EngineStats stats = engine.stats();
  // Where the engine's time went so far (cumulative, as the counters above): its steps and their parts.
  j["engine"] = {{"steps", stats.num_steps},
                 {"step_seconds", stats.step_seconds},
                 {"schedule_seconds", stats.schedule_seconds},
                 {"execute_seconds", stats.execute_seconds},
                 {"output_seconds", stats.output_seconds},
                 {"forward_passes", stats.forward_passes},
                 {"graph_replays", stats.graph_replays},
                 {"graphs_recorded", stats.graphs_recorded}};
  if (engine.options().speculative) {
    j["speculative"] = {{"draft_tokens", stats.spec_draft_tokens},
                        {"accepted_tokens", stats.spec_accepted_tokens},
                        {"verifications", stats.spec_verifies},
                        {"draft_tokens_per_position", stats.spec_draft_tokens_per_position},
                        {"accepted_tokens_per_position", stats.spec_accepted_tokens_per_position}};
    if (engine.draft_kv_cache()) {
      j["speculative"]["draft_steps"] = stats.spec_draft_steps;
      j["speculative"]["draft_cache_reclaims"] = stats.spec_draft_reclaims;
      j["speculative"]["draft_seconds"] = stats.draft_seconds;
      j["speculative"]["draft_forward_passes"] = stats.draft_forward_passes;
      j["speculative"]["draft_graph_replays"] = stats.draft_graph_replays;
      j["speculative"]["draft_graphs_recorded"] = stats.draft_graphs_recorded;
    }
  }
  print_json(j);
}

void run_one(Engine& engine, const std::vector<int32_t>& prompt_ids, const GenerateOptions& gen, bool json) {
  if (json) {
    const auto begin = std::chrono::steady_clock::now();
    const GenerateResult result = engine.generate(prompt_ids, gen);
    print_result_json(engine, prompt_ids, result, gen,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
    return;
  }
  // Plain mode: the prompt, then sample 0's text as it streams (stop strings left out).
  std::cout << engine.tokenizer().decode(prompt_ids, /*skip_special_tokens=*/true) << std::flush;
  const std::shared_ptr<RequestHandle> handle = engine.submit(prompt_ids, gen);
  std::string error;
  while (const std::optional<SampleDelta> d = handle->next()) {
    if (d->index == 0) std::cout << d->text << std::flush;
    if (d->finish_reason == FinishReason::kError && error.empty()) error = d->error;
  }
  std::cout << std::endl;
  if (!error.empty()) fail("{}", error);
}

// --seed: any 64-bit unsigned integer.
CLI::Validator seed_value() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(input.data(), input.data() + input.size(), v);
        if (!input.empty() && ec == std::errc() && end == input.data() + input.size()) return "";
        return fmt::format("must be an integer in [0, {}], got {}", UINT64_MAX, input.empty() ? "nothing" : input);
      },
      "UINT64");
}

void run_generate(const GenerateArgs& args, const CLI::App& cmd) {
  // Read every input before loading the model: a bad file fails fast.
  std::vector<PromptSpec> prompts;
  if (!args.prompts_file.empty()) {
    prompts = read_prompts_file(args.prompts_file);
  } else if (!args.prompt_ids.empty()) {
    prompts.push_back(PromptSpec{parse_ids(args.prompt_ids, "--prompt-ids"), "", std::nullopt});
  } else {
    prompts.push_back(PromptSpec{std::nullopt, args.prompt, std::nullopt});
  }

  GenerateOptions gen;
  gen.ignore_eos = args.ignore_eos;
  gen.sampling.temperature = args.temperature;
  gen.sampling.top_k = args.top_k;
  gen.sampling.top_p = args.top_p;
  gen.sampling.min_p = args.min_p;
  gen.sampling.presence_penalty = args.presence_penalty;
  gen.sampling.frequency_penalty = args.frequency_penalty;
  gen.sampling.repetition_penalty = args.repetition_penalty;
  gen.stop = args.stop;
  gen.min_tokens = args.min_tokens;
  gen.logprobs = args.logprobs;
  gen.n = args.n;
  gen.sampling.validate();  // before loading the model
  if (cmd.count("--seed") > 0) gen.sampling.seed = args.seed;

  Engine engine(args.model, make_backend(args.engine.device), engine_options(args.engine));
  note_stand_in_tokenizer(engine.tokenizer(), args.model);

  if (args.concurrent) {
    // Every prompt submitted at once; results printed in the file's order when all have finished ("kv" is
    // then the cache after the whole batch).
    std::vector<BatchRequest> batch;
    for (const PromptSpec& p : prompts) {
      gen.max_tokens = p.max_tokens.value_or(args.max_tokens);
      batch.push_back(BatchRequest{p.ids ? *p.ids : engine.tokenizer().encode(p.text), gen});
    }
    const std::vector<GenerateResult> results = engine.generate_batch(batch);
    for (size_t i = 0; i < batch.size(); ++i) {
      if (args.json) {
        print_result_json(engine, batch[i].prompt, results[i], batch[i].options);
      } else {
        std::cout << engine.tokenizer().decode(batch[i].prompt, /*skip_special_tokens=*/true) << results[i].text
                  << std::endl;
        if (results[i].finish_reason == "error") std::cerr << "error: " << results[i].error << std::endl;
      }
    }
    const auto failed = std::count_if(results.begin(), results.end(), [](const GenerateResult& r) {
      return std::any_of(r.samples.begin(), r.samples.end(), [](const SampleResult& s) { return s.finish_reason == "error"; });
    });
    if (failed > 0) fail("{} of {} requests ended with an error", failed, results.size());
    return;
  }

  // Prompts run one after another in this engine, sharing its KV cache (and prefix cache).
  for (const PromptSpec& p : prompts) {
    gen.max_tokens = p.max_tokens.value_or(args.max_tokens);
    run_one(engine, p.ids ? *p.ids : engine.tokenizer().encode(p.text), gen, args.json);
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a continuation of a prompt");
  cmd->add_option("--model", args->model, "Hugging Face model folder (config.json, *.safetensors, tokenizer.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  auto* text = cmd->add_option("--prompt", args->prompt, "Prompt text (tokenized with BOS)")
                   ->check(not_empty("the prompt has no text to continue (give text, or --prompt-ids)"));
  auto* ids = cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt token ids, comma-separated")
                  ->check(not_empty("give token ids separated by commas, e.g. 5,17,42"));
  auto* file = cmd->add_option("--prompts-file", args->prompts_file,
                               "JSON Lines of {\"prompt_ids\": [...]} or {\"prompt\": \"...\"} (optional "
                               "\"max_tokens\"), run one after another in one engine (all at once with --concurrent)")
                   ->check(not_empty("give the path of a JSON Lines file"));
  text->excludes(ids);
  file->excludes(text)->excludes(ids);
  cmd->add_option("--max-tokens", args->max_tokens, "Maximum number of tokens to generate")
      ->capture_default_str()
      ->check(integer_in(0, kMaxTokensFlag));
  cmd->add_option("--temperature", args->temperature, "Sampling temperature; 0 is greedy")
      ->capture_default_str()
      ->check(number_in(0, INFINITY));
  cmd->add_option("--top-k", args->top_k, "Keep the k most likely tokens (0: off)")
      ->capture_default_str()
      ->check(integer_in(0, INT64_MAX));
  cmd->add_option("--top-p", args->top_p, "Keep the smallest set of tokens with this probability mass")
      ->capture_default_str()
      ->check(number_in(0.0, 1.0, /*min_exclusive=*/true));
  cmd->add_option("--min-p", args->min_p,
                  "Keep tokens at least this fraction as likely as the most likely one (0: off; applied after "
                  "top-k and top-p)")
      ->capture_default_str()
      ->check(number_in(0.0, 1.0));
  cmd->add_option("--presence-penalty", args->presence_penalty,
                  "Subtracted from the logit of every token already in the output, in [-2, 2] (0: off)")
      ->capture_default_str()
      ->check(number_in(-2.0, 2.0));
  cmd->add_option("--frequency-penalty", args->frequency_penalty,
                  "Times a token's count in the output, subtracted from its logit, in [-2, 2] (0: off)")
      ->capture_default_str()
      ->check(number_in(-2.0, 2.0));
  cmd->add_option("--repetition-penalty", args->repetition_penalty,
                  "Divides positive logits (multiplies negative ones) of tokens in the prompt or output, as "
                  "transformers (1: off; > 1 discourages repetition)")
      ->capture_default_str()
      ->check(number_in(0.0, INFINITY, /*min_exclusive=*/true));
  cmd->add_option("--seed", args->seed,
                  "Seed of the sampler (reproducible sampling: the same tokens on the CPU and the GPU)")
      ->check(seed_value());
  add_engine_flags(cmd, args->engine);
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating after an end-of-sequence token");
  cmd->add_option("--stop", args->stop,
                  "A string that ends generation when it appears in the output (left out of the text); repeatable")
      ->check(not_empty("a stop string needs at least one character"));
  cmd->add_option("--min-tokens", args->min_tokens,
                  "Tokens generated before an end-of-sequence token or a stop string may end generation")
      ->capture_default_str()
      ->check(integer_in(0, kMaxTokensFlag));
  cmd->add_option("--logprobs", args->logprobs,
                  "With --json: the log-probability of each generated token and of the N most likely ones (0-20; "
                  "-1: none)")
      ->capture_default_str()
      ->check(integer_in(-1, kMaxLogprobs));
  cmd->add_option("--n", args->n, "Samples per prompt (they share the prompt's KV blocks)")
      ->capture_default_str()
      ->check(integer_in(1, kMaxSamplesPerRequest));
  cmd->add_flag("--concurrent", args->concurrent,
                "Submit every prompt at once and run them together (continuous batching) instead of one after "
                "another; output in the prompts' order when all have finished");
  cmd->add_flag("--json", args->json,
                "Print one JSON object per prompt {prompt_ids, ids, text, finish_reason, cached_tokens, kv} (with "
                "\"logprobs\" and \"samples\" when asked for)");
  cmd->callback([args, cmd] {
    if (args->prompt.empty() && args->prompt_ids.empty() && args->prompts_file.empty()) {
      throw CLI::RequiredError("generate: no prompt: give --prompt TEXT, --prompt-ids IDS or --prompts-file FILE",
                               CLI::ExitCodes::RequiredError);
    }
    run_generate(*args, *cmd);
  });
}

}  // namespace tide::cli
