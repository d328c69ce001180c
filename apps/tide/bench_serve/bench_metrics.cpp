#include "apps/tide/bench_serve/bench_metrics.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include <fmt/format.h>

namespace tide::bench {
namespace {

using nlohmann::json;

Summary summarize_ms(const std::vector<double>& seconds, const std::vector<double>& percentiles) {
  std::vector<double> ms;
  ms.reserve(seconds.size());
  for (double s : seconds) ms.push_back(s * 1000.0);
  return summarize(std::move(ms), percentiles);
}

// Output tokens per 1 s bucket from the first send; a chunk's tokens are its request's output tokens spread
// evenly over its chunks (a chunk may carry several tokens, and only the usage chunk says how many in all).
double peak_tokens_per_s(const std::vector<RequestRecord>& records) {
  double first = INFINITY;
  for (const RequestRecord& r : records) {
    if (r.success) first = std::min(first, r.start_s);
  }
  std::vector<double> buckets;
  for (const RequestRecord& r : records) {
    if (!r.success || r.chunk_s.empty()) continue;
    const double per_chunk = static_cast<double>(r.output_tokens) / static_cast<double>(r.chunk_s.size());
    for (double t : r.chunk_s) {
      const auto b = static_cast<size_t>(std::max(0.0, std::floor(t - first)));
      if (b >= buckets.size()) buckets.resize(b + 1, 0.0);
      buckets[b] += per_chunk;
    }
  }
  return buckets.empty() ? 0.0 : *std::max_element(buckets.begin(), buckets.end());
}

void add_summary(json& out, const char* name, const Summary& s) {
  out[fmt::format("mean_{}_ms", name)] = s.mean;
  out[fmt::format("median_{}_ms", name)] = s.median;
  out[fmt::format("std_{}_ms", name)] = s.std;
  for (const auto& [p, value] : s.percentiles) out[fmt::format("p{}_{}_ms", percentile_name(p), name)] = value;
}

void add_line(std::string& out, std::string_view label, std::string_view value) {
  out += fmt::format("{:<40} {}\n", label, value);
}

void add_section(std::string& out, std::string_view title, std::string_view name, const Summary& s) {
  out += fmt::format("{:-^50}\n", title);
  add_line(out, fmt::format("Mean {} (ms):", name), fmt::format("{:.2f}", s.mean));
  add_line(out, fmt::format("Median {} (ms):", name), fmt::format("{:.2f}", s.median));
  for (const auto& [p, value] : s.percentiles) {
    add_line(out, fmt::format("P{} {} (ms):", percentile_name(p), name), fmt::format("{:.2f}", value));
  }
}

}  // namespace

int64_t peak_concurrency(const std::vector<RequestRecord>& records) {
  std::vector<std::pair<double, int>> events;
  for (const RequestRecord& r : records) {
    events.emplace_back(r.start_s, +1);
    events.emplace_back(std::max(r.start_s, r.end_s), -1);
  }
  std::sort(events.begin(), events.end());  // at equal times an end (-1) sorts first: [start, end) intervals
  int64_t now = 0, peak = 0;
  for (const auto& [t, delta] : events) {
    now += delta;
    peak = std::max(peak, now);
  }
  return peak;
}

BenchMetrics compute_metrics(const std::vector<RequestRecord>& records, double duration_s,
                             const std::vector<double>& percentiles) {
  BenchMetrics m;
  m.duration_s = duration_s;
  m.percentiles = percentiles;
  std::vector<double> ttfts, tpots, itls, e2els;
  for (const RequestRecord& r : records) {
    ++m.finish_reason_counts[r.finish_reason.empty() ? "none" : r.finish_reason];
    if (!r.success) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.prompt_len;
    m.total_output_tokens += r.output_tokens;
    if (r.cached_tokens) m.total_cached_tokens = m.total_cached_tokens.value_or(0) + *r.cached_tokens;
    ttfts.push_back(r.ttft_s());
    e2els.push_back(r.e2el_s());
    if (const auto tpot = r.tpot_s()) tpots.push_back(*tpot);
    const std::vector<double> gaps = r.itls_s();
    itls.insert(itls.end(), gaps.begin(), gaps.end());
  }
  if (duration_s > 0) {
    m.request_throughput = static_cast<double>(m.completed) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input_tokens + m.total_output_tokens) / duration_s;
  }
  m.max_output_tokens_per_s = peak_tokens_per_s(records);
  m.max_concurrent_requests = peak_concurrency(records);
  m.ttft_ms = summarize_ms(ttfts, percentiles);
  m.tpot_ms = summarize_ms(tpots, percentiles);
  m.itl_ms = summarize_ms(itls, percentiles);
  m.e2el_ms = summarize_ms(e2els, percentiles);
  return m;
}

json metrics_json(const BenchMetrics& m) {
  json out = {{"duration", m.duration_s},
              {"completed", m.completed},
              {"failed", m.failed},
              {"finish_reason_counts", m.finish_reason_counts},
              {"total_input_tokens", m.total_input_tokens},
              {"total_output_tokens", m.total_output_tokens},
              {"total_cached_tokens", m.total_cached_tokens ? json(*m.total_cached_tokens) : json(nullptr)},
              {"request_throughput", m.request_throughput},
              {"output_throughput", m.output_throughput},
              {"total_token_throughput", m.total_token_throughput},
              {"max_output_tokens_per_s", m.max_output_tokens_per_s},
              {"max_concurrent_requests", m.max_concurrent_requests}};
  add_summary(out, "ttft", m.ttft_ms);
  add_summary(out, "tpot", m.tpot_ms);
  add_summary(out, "itl", m.itl_ms);
  add_summary(out, "e2el", m.e2el_ms);
  return out;
}

json per_request_json(const std::vector<RequestRecord>& records) {
  json input_lens = json::array(), output_lens = json::array(), max_tokens = json::array(), ttfts = json::array(),
       itls = json::array(), tpots = json::array(), latencies = json::array(), start_times = json::array(),
       end_times = json::array(), finish_reasons = json::array(), statuses = json::array(),
       cached = json::array(), errors = json::array();
  for (const RequestRecord& r : records) {
    input_lens.push_back(r.prompt_len);
    output_lens.push_back(r.output_tokens);
    max_tokens.push_back(r.max_tokens);
    ttfts.push_back(r.ttft_s());
    itls.push_back(r.itls_s());
    const auto tpot = r.tpot_s();
    tpots.push_back(tpot ? json(*tpot) : json(nullptr));
    latencies.push_back(r.e2el_s());
    start_times.push_back(r.start_s);
    end_times.push_back(r.end_s);
    finish_reasons.push_back(r.finish_reason.empty() ? json(nullptr) : json(r.finish_reason));
    statuses.push_back(r.http_status);
    cached.push_back(r.cached_tokens ? json(*r.cached_tokens) : json(nullptr));
    errors.push_back(r.error);
  }
  return {{"input_lens", input_lens},   {"output_lens", output_lens},       {"max_tokens", max_tokens},
          {"ttfts", ttfts},             {"itls", itls},                     {"tpots", tpots},
          {"latencies", latencies},     {"start_times", start_times},       {"end_times", end_times},
          {"finish_reasons", finish_reasons}, {"http_statuses", statuses}, {"cached_tokens", cached},
          {"errors", errors}};
}

std::string format_report(const BenchMetrics& m, int64_t max_concurrency, double request_rate) {
  std::string out = fmt::format("{:=^50}\n", " Serving Benchmark Result ");
  add_line(out, "Successful requests:", fmt::format("{}", m.completed));
  add_line(out, "Failed requests:", fmt::format("{}", m.failed));
  std::string reasons;
  for (const auto& [reason, count] : m.finish_reason_counts) {
    reasons += fmt::format("{}{} {}", reasons.empty() ? "" : ", ", reason, count);
  }
  add_line(out, "Finish reasons:", reasons);
  if (max_concurrency > 0) add_line(out, "Maximum request concurrency:", fmt::format("{}", max_concurrency));
  if (!std::isinf(request_rate)) add_line(out, "Request rate configured (RPS):", fmt::format("{:.2f}", request_rate));
  add_line(out, "Benchmark duration (s):", fmt::format("{:.2f}", m.duration_s));
  add_line(out, "Total input tokens:", fmt::format("{}", m.total_input_tokens));
  add_line(out, "Total generated tokens:", fmt::format("{}", m.total_output_tokens));
  if (m.total_cached_tokens) add_line(out, "Cached prompt tokens:", fmt::format("{}", *m.total_cached_tokens));
  add_line(out, "Request throughput (req/s):", fmt::format("{:.2f}", m.request_throughput));
  add_line(out, "Output token throughput (tok/s):", fmt::format("{:.2f}", m.output_throughput));
  add_line(out, "Peak output token throughput (tok/s):", fmt::format("{:.2f}", m.max_output_tokens_per_s));
  add_line(out, "Peak concurrent requests:", fmt::format("{}", m.max_concurrent_requests));
  add_line(out, "Total token throughput (tok/s):", fmt::format("{:.2f}", m.total_token_throughput));
  add_section(out, "Time to First Token", "TTFT", m.ttft_ms);
  add_section(out, "Time per Output Token (excl. 1st token)", "TPOT", m.tpot_ms);
  add_section(out, "Inter-token Latency", "ITL", m.itl_ms);
  add_section(out, "End-to-end Latency", "E2EL", m.e2el_ms);
  out += std::string(50, '=') + "\n";
  return out;
}

}  // namespace tide::bench
