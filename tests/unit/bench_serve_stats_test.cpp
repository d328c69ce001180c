// tide bench serve's statistics (numpy's mean / median / std / linear percentiles, computed here by hand) and
// its figures from request records (vLLM's TTFT, TPOT, ITL, end-to-end latency, throughputs, peak concurrency).
#include <gtest/gtest.h>

#include <cmath>

#include "apps/tide/bench_serve/bench_metrics.h"
#include "apps/tide/bench_serve/stats.h"
#include "core/error.h"

namespace tide::bench {
namespace {

TEST(BenchStats, SummarizesLikeNumpy) {
  // np.mean 2.5, np.median 2.5, np.std (population) sqrt(1.25); np.percentile rank p/100 * 3 interpolated:
  // p90 at rank 2.7 -> 3.7, p99 at 2.97 -> 3.97, p50 at 1.5 -> 2.5, p25 at 0.75 -> 1.75, p100 -> 4.
  const Summary s = summarize({4, 1, 3, 2}, {25, 50, 90, 99, 100});
  EXPECT_EQ(s.count, 4u);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.std, std::sqrt(1.25));
  ASSERT_EQ(s.percentiles.size(), 5u);
  EXPECT_EQ(s.percentiles[0].first, 25);
  EXPECT_DOUBLE_EQ(s.percentiles[0].second, 1.75);
  EXPECT_DOUBLE_EQ(s.percentiles[1].second, 2.5);
  EXPECT_DOUBLE_EQ(s.percentiles[2].second, 3.7);
  EXPECT_DOUBLE_EQ(s.percentiles[3].second, 3.97);
  EXPECT_DOUBLE_EQ(s.percentiles[4].second, 4);
}

TEST(BenchStats, OddCountMedianIsTheMiddleValue) {
  const Summary s = summarize({10, 30, 20, 50, 40}, {50});
  EXPECT_DOUBLE_EQ(s.median, 30);
  EXPECT_DOUBLE_EQ(s.mean, 30);
  EXPECT_DOUBLE_EQ(s.std, std::sqrt(200.0));  // deviations 20, 10, 0, 10, 20: (400+100+0+100+400) / 5
}

TEST(BenchStats, OneValueAndNoValue) {
  const Summary one = summarize({7}, {99});
  EXPECT_DOUBLE_EQ(one.mean, 7);
  EXPECT_DOUBLE_EQ(one.median, 7);
  EXPECT_DOUBLE_EQ(one.std, 0);
  EXPECT_DOUBLE_EQ(one.percentiles[0].second, 7);
  const Summary none = summarize({}, {99});
  EXPECT_EQ(none.count, 0u);
  EXPECT_EQ(none.mean, 0);
  EXPECT_EQ(none.median, 0);
  ASSERT_EQ(none.percentiles.size(), 1u);
  EXPECT_EQ(none.percentiles[0].second, 0);
}

TEST(BenchStats, ParsesPercentiles) {
  EXPECT_EQ(parse_percentiles("50,90,99", "--percentiles"), (std::vector<double>{50, 90, 99}));
  EXPECT_EQ(parse_percentiles(" 99.9 , 100", "--percentiles"), (std::vector<double>{99.9, 100}));
  for (const char* bad : {"", "0", "101", "50,,90", "ninety", "50;90", "-1"}) {
    EXPECT_THROW(parse_percentiles(bad, "--percentiles"), Error) << bad;
  }
  EXPECT_EQ(percentile_name(99), "99");
  EXPECT_EQ(percentile_name(99.9), "99.9");
}

RequestRecord record(double start, std::vector<double> chunks, int64_t output_tokens, double end, bool success) {
  RequestRecord r;
  r.prompt_len = 10;
  r.max_tokens = output_tokens;
  r.start_s = start;
  r.chunk_s = std::move(chunks);
  r.output_tokens = output_tokens;
  r.end_s = end;
  r.success = success;
  r.finish_reason = success ? "length" : "";
  r.error = success ? "" : "HTTP 400: no";
  return r;
}

TEST(BenchMetrics, ComputesVllmFigures) {
  // a: sent at 0, token chunks at 1, 2, 3 (3 tokens): TTFT 1, E2EL 3, TPOT (3 - 1) / 2 = 1, ITLs 1, 1.
  // b: sent at 0.5, chunks at 1 and 1.5 carrying 4 tokens: TTFT 0.5, E2EL 1, TPOT 0.5 / 3, ITL 0.5.
  // c: failed, in flight over [0, 0.6): counted in failed and peak concurrency, nowhere else.
  const std::vector<RequestRecord> records = {record(0, {1, 2, 3}, 3, 3.1, true), record(0.5, {1, 1.5}, 4, 1.6, true),
                                              record(0, {}, 0, 0.6, false)};
  const BenchMetrics m = compute_metrics(records, 4.0, {50, 99});
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.finish_reason_counts, (std::map<std::string, int64_t>{{"length", 2}, {"none", 1}}));
  EXPECT_EQ(m.total_input_tokens, 20);
  EXPECT_EQ(m.total_output_tokens, 7);
  EXPECT_DOUBLE_EQ(m.request_throughput, 0.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 7 / 4.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 27 / 4.0);
  EXPECT_DOUBLE_EQ(m.ttft_ms.mean, 750);
  EXPECT_DOUBLE_EQ(m.e2el_ms.mean, 2000);
  EXPECT_DOUBLE_EQ(m.e2el_ms.median, 2000);
  EXPECT_NEAR(m.tpot_ms.mean, (1000 + 500 / 3.0) / 2, 1e-9);
  EXPECT_EQ(m.itl_ms.count, 3u);
  EXPECT_NEAR(m.itl_ms.mean, 2500 / 3.0, 1e-9);
  EXPECT_DOUBLE_EQ(m.itl_ms.median, 1000);
  EXPECT_EQ(m.max_concurrent_requests, 3);  // at 0.5: a, b and c
  // 1 s buckets from the first send (0): a puts 1 token in each of buckets 1, 2, 3; b's chunks carry 2 tokens
  // each, both in bucket 1.
  EXPECT_DOUBLE_EQ(m.max_output_tokens_per_s, 5);
  EXPECT_FALSE(m.total_cached_tokens.has_value());

  const nlohmann::json j = metrics_json(m);
  EXPECT_EQ(j["completed"], 2);
  EXPECT_EQ(j["finish_reason_counts"]["length"], 2);
  EXPECT_DOUBLE_EQ(j["mean_ttft_ms"].get<double>(), 750);
  for (const char* key : {"median_tpot_ms", "std_itl_ms", "p50_e2el_ms", "p99_ttft_ms", "p99_itl_ms"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  const nlohmann::json per = per_request_json(records);
  EXPECT_EQ(per["output_lens"], nlohmann::json({3, 4, 0}));
  EXPECT_TRUE(per["tpots"][2].is_null());
  EXPECT_EQ(per["itls"][0], nlohmann::json({1.0, 1.0}));
  EXPECT_EQ(per["errors"][2], "HTTP 400: no");

  const std::string report = format_report(m, 4, INFINITY);
  EXPECT_NE(report.find("Successful requests:                     2\n"), std::string::npos) << report;
  EXPECT_NE(report.find("Failed requests:                         1\n"), std::string::npos) << report;
  EXPECT_NE(report.find("Maximum request concurrency:             4\n"), std::string::npos) << report;
  EXPECT_EQ(report.find("Request rate configured"), std::string::npos) << report;
  EXPECT_NE(report.find("P99 ITL (ms):"), std::string::npos) << report;
}

TEST(BenchMetrics, AggregateAndPerRequestKeysDoNotCollide) {
  // The result file merges both objects at its top level, so a shared key would lose one of them.
  const std::vector<RequestRecord> records = {record(0, {1, 2}, 2, 2.5, true)};
  const nlohmann::json aggregate = metrics_json(compute_metrics(records, 3.0, {99}));
  const nlohmann::json per = per_request_json(records);
  for (const auto& [key, value] : per.items()) EXPECT_FALSE(aggregate.contains(key)) << key;
}

TEST(BenchMetrics, PeakConcurrencyTreatsIntervalsAsHalfOpen) {
  EXPECT_EQ(peak_concurrency({record(0, {0.5}, 1, 1, true), record(1, {1.5}, 1, 2, true)}), 1);
  EXPECT_EQ(peak_concurrency({record(0, {0.5}, 1, 1.01, true), record(1, {1.5}, 1, 2, true)}), 2);
  EXPECT_EQ(peak_concurrency({}), 0);
}

TEST(BenchMetrics, OneTokenHasNoTpotAndNoRequestsGiveZeros) {
  const BenchMetrics one = compute_metrics({record(0, {0.25}, 1, 0.3, true)}, 1.0, {99});
  EXPECT_EQ(one.tpot_ms.count, 0u);
  EXPECT_EQ(one.itl_ms.count, 0u);
  EXPECT_DOUBLE_EQ(one.ttft_ms.mean, 250);
  const BenchMetrics none = compute_metrics({}, 0.0, {99});
  EXPECT_EQ(none.completed, 0);
  EXPECT_EQ(none.request_throughput, 0);
  EXPECT_EQ(none.max_output_tokens_per_s, 0);
}

}  // namespace
}  // namespace tide::bench
