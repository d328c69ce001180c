// tide bench serve: a serving benchmark in the manner of `vllm bench serve`. It drives a running
// OpenAI-compatible server (tide serve, vLLM, any server of the standard API) with streamed /v1/completions
// requests of random token-id prompts, at a request rate and / or a concurrency limit, and reports what users
// feel: time to first token, time per output token, inter-token and end-to-end latency, throughput. Failed
// requests are part of the result; the exit status is non-zero only for bad flags, a server that cannot be
// reached, or (with --fail-on-error) a failed request.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "apps/tide/bench_serve/bench_metrics.h"
#include "apps/tide/bench_serve/stats.h"
#include "apps/tide/bench_serve/workload.h"
#include "apps/tide/bench_serve_client.h"
#include "apps/tide/commands.h"
#include "core/error.h"

namespace tide::cli {
namespace {

using nlohmann::json;
using namespace tide::bench;

struct BenchServeArgs {
  Endpoint endpoint;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model;
  std::string dataset = "random";
  WorkloadOptions workload;
  int64_t vocab_size = 0;
  int64_t max_concurrency = 0;
  std::string request_rate = "inf";
  double burstiness = 1.0;
  int64_t num_warmups = 0;
  bool ignore_eos = true;
  std::string extra_body;  // JSON object merged into every request (e.g. a response_format)
  std::string percentiles = "99";
  std::string result_json;
  bool fail_on_error = false;
  double ready_timeout_s = 0;
};

double parse_rate(const std::string& text) {
  if (text == "inf") return INFINITY;
  char* end = nullptr;
  const double rate = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(rate > 0)) {
    fail("--request-rate: '{}' is not a positive number of requests per second or 'inf'", text);
  }
  return rate;
}

json request_body(const std::string& model, const BenchPrompt& prompt, bool ignore_eos, const json& extra) {
  json body = {{"model", model},
               {"prompt", prompt.ids},
               {"max_tokens", prompt.max_tokens},
               {"temperature", 0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (ignore_eos) body["ignore_eos"] = true;
  for (const auto& [key, value] : extra.items()) body[key] = value;
  return body;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// Prints "done/total" to stderr at every tenth of the run.
class Progress {
 public:
  explicit Progress(size_t total) : total_(total), step_(std::max<size_t>(1, total / 10)) {}
  void tick() {
    ++done_;
    if (done_ % step_ == 0 || done_ == total_) std::cerr << fmt::format("bench: {}/{} requests ended\n", done_, total_);
  }

 private:
  size_t total_, step_, done_ = 0;
};

void run_bench_serve(BenchServeArgs args) {
  // A server that closes a connection while a request is being written must not kill the benchmark.
  std::signal(SIGPIPE, SIG_IGN);
  const double rate = parse_rate(args.request_rate);
  const std::vector<double> percentiles = parse_percentiles(args.percentiles, "--percentiles");
  if (args.endpoint.path.empty() || args.endpoint.path.front() != '/') fail("--endpoint must start with '/'");
  if (args.endpoint.base_url.empty()) args.endpoint.base_url = fmt::format("http://{}:{}", args.host, args.port);
  while (!args.endpoint.base_url.empty() && args.endpoint.base_url.back() == '/') args.endpoint.base_url.pop_back();
  if (args.endpoint.api_key.empty()) {
    if (const char* key = std::getenv("OPENAI_API_KEY")) args.endpoint.api_key = key;
  }

  const ServerInfo server = query_server(args.endpoint, args.ready_timeout_s);
  const std::string model = args.model.empty() ? server.model : args.model;
  WorkloadOptions& w = args.workload;
  w.dataset = args.dataset == "random" ? Dataset::kRandom : Dataset::kSharedPrefix;
  w.vocab_size = args.vocab_size > 0 ? args.vocab_size : server.vocab_size.value_or(0);
  if (w.vocab_size < 1) {
    fail("{}/v1/models gives no vocab_size (a vLLM server): pass --vocab-size", args.endpoint.base_url);
  }
  const std::vector<BenchPrompt> prompts = make_workload(w);
  const std::vector<double> arrivals = arrival_times(w.num_prompts, rate, args.burstiness, w.seed);
  size_t longest = 0;
  int64_t most_tokens = 0;
  for (const BenchPrompt& p : prompts) {
    longest = std::max(longest, p.ids.size());
    most_tokens = std::max<int64_t>(most_tokens, static_cast<int64_t>(p.ids.size()) + p.max_tokens);
  }
  if (server.max_model_len && most_tokens > *server.max_model_len) {
    std::cerr << fmt::format("bench: warning: prompts of up to {} tokens plus their outputs reach {} tokens, beyond "
                             "the server's max_model_len {}: such requests will fail\n",
                             longest, most_tokens, *server.max_model_len);
  }

  json extra = json::object();
  if (!args.extra_body.empty()) {
    extra = json::parse(args.extra_body, nullptr, /*allow_exceptions=*/false);
    if (!extra.is_object()) fail("--extra-body must be a JSON object, got '{}'", args.extra_body);
  }
  std::vector<std::string> bodies;
  std::vector<RequestRecord> records(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    bodies.push_back(request_body(model, prompts[i], args.ignore_eos, extra).dump());
    records[i].prompt_len = static_cast<int64_t>(prompts[i].ids.size());
    records[i].max_tokens = prompts[i].max_tokens;
  }
  std::cerr << fmt::format("bench: {} prompts ({} dataset, vocabulary {}, ids from {}) to {}{} as \"{}\"; "
                           "request rate {}, max concurrency {}\n",
                           prompts.size(), dataset_name(w.dataset), w.vocab_size, first_token_id(w.vocab_size),
                           args.endpoint.base_url, args.endpoint.path, model, args.request_rate,
                           args.max_concurrency > 0 ? std::to_string(args.max_concurrency) : "none");

  if (args.num_warmups > 0) {
    // The first prompt, num_warmups times, all at once within the concurrency limit; not in the results.
    std::cerr << fmt::format("bench: warming up with {} requests\n", args.num_warmups);
    const std::vector<std::string> warm_bodies(static_cast<size_t>(args.num_warmups), bodies.front());
    std::vector<RequestRecord> warm(warm_bodies.size(), records.front());
    run_requests(args.endpoint, warm_bodies, std::vector<double>(warm_bodies.size(), 0.0), args.max_concurrency,
                 Clock::now(), warm, [](size_t) {});
    size_t failed = 0;
    for (const RequestRecord& r : warm) failed += r.success ? 0 : 1;
    if (failed > 0) {
      std::cerr << fmt::format("bench: warning: {} of {} warm-up requests failed: {}\n", failed, warm.size(),
                               std::find_if(warm.begin(), warm.end(), [](const RequestRecord& r) {
                                 return !r.success;
                               })->error);
    }
  }

  Progress progress(prompts.size());
  const Clock::time_point t0 = Clock::now();
  run_requests(args.endpoint, bodies, arrivals, args.max_concurrency, t0, records, [&](size_t) { progress.tick(); });
  const double duration_s = std::chrono::duration<double>(Clock::now() - t0).count();

  const BenchMetrics metrics = compute_metrics(records, duration_s, percentiles);
  size_t shown = 0;
  for (size_t i = 0; i < records.size() && shown < 10; ++i) {
    if (records[i].success) continue;
    std::cerr << fmt::format("bench: request {} failed: {}\n", i, records[i].error);
    ++shown;
  }
  std::cout << format_report(metrics, args.max_concurrency, rate) << std::flush;

  if (!args.result_json.empty()) {
    const json rate_json = std::isinf(rate) ? json("inf") : json(rate);
    json config = {{"base_url", args.endpoint.base_url},
                   {"endpoint", args.endpoint.path},
                   {"model", model},
                   {"dataset", dataset_name(w.dataset)},
                   {"num_prompts", w.num_prompts},
                   {"random_input_len", w.input_len},
                   {"random_output_len", w.output_len},
                   {"random_range_ratio", w.range_ratio},
                   {"random_prefix_len", w.prefix_len},
                   {"vocab_size", w.vocab_size},
                   {"first_token_id", first_token_id(w.vocab_size)},
                   {"seed", w.seed},
                   {"request_rate", rate_json},
                   {"burstiness", args.burstiness},
                   {"max_concurrency", args.max_concurrency > 0 ? json(args.max_concurrency) : json(nullptr)},
                   {"num_warmups", args.num_warmups},
                   {"ignore_eos", args.ignore_eos},
                   {"temperature", 0},
                   {"percentiles", percentiles},
                   {"server_max_model_len", server.max_model_len ? json(*server.max_model_len) : json(nullptr)}};
    if (w.dataset == Dataset::kSharedPrefix) {
      config["shared_prefix_groups"] = w.num_groups;
      config["shared_prefix_len"] = w.group_prefix_len;
    }
    json result = {{"date", utc_now()},
                   {"backend", "openai"},
                   {"model_id", model},
                   {"num_prompts", w.num_prompts},
                   {"request_rate", rate_json},
                   {"burstiness", args.burstiness},
                   {"max_concurrency", config["max_concurrency"]},
                   {"config", config}};
    result.update(metrics_json(metrics));
    result.update(per_request_json(records));
    json groups = json::array();
    for (const BenchPrompt& p : prompts) groups.push_back(p.group);
    result["prefix_groups"] = groups;
    std::ofstream out(args.result_json);
    out << result.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    if (!out) fail("--result-json: cannot write {}", args.result_json);
    std::cerr << fmt::format("bench: result written to {}\n", args.result_json);
  }
  if (args.fail_on_error && metrics.failed > 0) {
    fail("{} of {} requests failed (--fail-on-error)", metrics.failed, records.size());
  }
}

void add_bench_serve_command(CLI::App& bench) {
  auto args = std::make_shared<BenchServeArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "serve", "Benchmark a running OpenAI-compatible server (tide serve, vLLM) with streamed /v1/completions");
  WorkloadOptions& w = args->workload;
  // Where.
  cmd->add_option("--base-url", args->endpoint.base_url,
                  "The server's URL, e.g. http://127.0.0.1:8000 (default: from --host and --port)");
  cmd->add_option("--host", args->host, "The server's host when no --base-url")->capture_default_str();
  cmd->add_option("--port", args->port, "The server's port when no --base-url")
      ->capture_default_str()
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--endpoint", args->endpoint.path, "The completions route")->capture_default_str();
  cmd->add_option("--model", args->model, "The model name requests carry (default: the first of /v1/models)");
  cmd->add_option("--api-key", args->endpoint.api_key, "Sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY)");
  // What.
  cmd->add_option("--dataset,--dataset-name", args->dataset,
                  "random: a random token-id prompt each (after --random-prefix-len shared ids); shared-prefix: "
                  "the same, each prompt also led by one of --shared-prefix-groups group prefixes")
      ->capture_default_str()
      ->check(CLI::IsMember({"random", "shared-prefix"}));
  cmd->add_option("--num-prompts", w.num_prompts, "Requests to send")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--random-input-len", w.input_len, "Tokens of each prompt's own part (after shared prefixes)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--random-output-len", w.output_len, "Output tokens asked for (max_tokens)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--random-range-ratio", w.range_ratio,
                  "Lengths uniform in [len * (1 - r), len * (1 + r)] (input and output), r in [0, 1)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.999999));
  cmd->add_option("--random-prefix-len", w.prefix_len, "Tokens of a prefix shared by every prompt")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  w.num_groups = 8;
  w.group_prefix_len = 1024;
  cmd->add_option("--shared-prefix-groups", w.num_groups,
                  "shared-prefix: groups of prompts, each with its own prefix; prompt i is in group i % groups")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--shared-prefix-len", w.group_prefix_len, "shared-prefix: tokens of each group's prefix")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--vocab-size", args->vocab_size,
                  "Token ids are drawn below this (default: /v1/models' vocab_size, which tide serve reports); ids "
                  "start at 256 when it is at least 512")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seed", w.seed, "Seed of the prompts, their lengths and the arrival times")->capture_default_str();
  cmd->add_flag("--ignore-eos,!--no-ignore-eos", args->ignore_eos,
                "Ask the server to generate max_tokens tokens whatever they are (default on)");
  cmd->add_option("--extra-body", args->extra_body,
                  "A JSON object merged into every request body (e.g. '{\"response_format\": ...}')");
  // How fast.
  cmd->add_option("--max-concurrency", args->max_concurrency, "Requests in flight at most (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--request-rate", args->request_rate,
                  "Requests per second, arriving as a Poisson process (see --burstiness); inf: all at once")
      ->capture_default_str();
  cmd->add_option("--burstiness", args->burstiness,
                  "Shape of the gamma-distributed gaps between arrivals: 1 Poisson, < 1 burstier, > 1 more even")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--num-warmups", args->num_warmups, "Requests of the first prompt sent before, not measured")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  // Timeouts.
  cmd->add_option("--connect-timeout", args->endpoint.connect_timeout_s, "Seconds to connect (and to send a request)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--read-timeout", args->endpoint.read_timeout_s,
                  "Seconds a response may stay silent (the wait for the first token included)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--ready-timeout", args->ready_timeout_s,
                  "Seconds to keep retrying GET /v1/models while the server is unreachable or loading (0: once)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  // Results.
  cmd->add_option("--percentiles,--metric-percentiles", args->percentiles,
                  "Latency percentiles reported beside mean and median, e.g. 50,90,99")
      ->capture_default_str();
  cmd->add_option("--result-json", args->result_json,
                  "Write the configuration, the aggregate figures and per-request arrays to this file");
  cmd->add_flag("--fail-on-error", args->fail_on_error, "Exit with status 1 when any request failed");
  cmd->callback([args] { run_bench_serve(*args); });
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks: serve (a running OpenAI-compatible server)");
  bench->require_subcommand(1);
  add_bench_serve_command(*bench);
}

}  // namespace tide::cli
