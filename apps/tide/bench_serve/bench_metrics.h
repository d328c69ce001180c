// The benchmark's figures from its requests' records, with `vllm bench serve`'s definitions: throughputs over
// the benchmark's duration counting successful requests only; TTFT, TPOT and end-to-end latency per successful
// request; ITL over every gap between token chunks of successful requests, pooled. Rendered as vLLM's text table
// and as JSON with vLLM's keys (mean_ttft_ms, p99_itl_ms, ...; per-request arrays in seconds), so scripts that
// read vLLM's result files read these.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/tide/bench_serve/request_record.h"
#include "apps/tide/bench_serve/stats.h"

namespace tide::bench {

struct BenchMetrics {
  int64_t completed = 0;
  int64_t failed = 0;
  std::map<std::string, int64_t> finish_reason_counts;  // every request's; "none" when its stream gave none
  double duration_s = 0;
  int64_t total_input_tokens = 0;     // successful requests
  int64_t total_output_tokens = 0;    // successful requests
  std::optional<int64_t> total_cached_tokens;  // successful requests, when the server reports cached tokens
  double request_throughput = 0;      // completed / duration
  double output_throughput = 0;       // output tokens / duration
  double total_token_throughput = 0;  // (input + output tokens) / duration
  double max_output_tokens_per_s = 0; // the busiest 1 s bucket of token arrivals, counted from the first send
  int64_t max_concurrent_requests = 0;
  std::vector<double> percentiles;
  Summary ttft_ms, tpot_ms, itl_ms, e2el_ms;
};

// The most requests in flight at once: a sweep over each sent request's [start_s, end_s).
int64_t peak_concurrency(const std::vector<RequestRecord>& records);

BenchMetrics compute_metrics(const std::vector<RequestRecord>& records, double duration_s,
                             const std::vector<double>& percentiles);

// Aggregate figures, flat, with vLLM's key names.
nlohmann::json metrics_json(const BenchMetrics& metrics);
// One array per field, one entry per request in prompt order: input_lens, output_lens, max_tokens, ttfts, itls,
// tpots, latencies, start_times, end_times (seconds), finish_reasons, http_statuses, cached_tokens, errors.
nlohmann::json per_request_json(const std::vector<RequestRecord>& records);

// The report printed on stdout. `max_concurrency` 0 and `request_rate` infinity are left out, as vLLM does.
std::string format_report(const BenchMetrics& metrics, int64_t max_concurrency, double request_rate);

}  // namespace tide::bench
