// CudaBackend::sample alone at V = 256000 for R = 1, 8, 32, 128 rows: all filters and penalties on (the
// common serving mix), top-p alone (its mass histograms then cover the whole row), and greedy. Figures:
// microseconds per call (staging copy and kernel, back to back on the stream, averaged over a burst of
// calls) and GB/s of logits, counted once per call (the kernel reads them several times, mostly from L2).
// The logits stay in L2 between calls when they fit, as they do after the logits matmul of a decode step.
#include <fmt/format.h>

#include <random>

#include "backend/cuda/cuda_backend.h"
#include "bench/bench_util.h"
#include "bench/sections.h"

namespace tide::bench {
namespace {

constexpr int64_t kVocab = 256000;

struct Mix {
  const char* name;
  SamplingRow row;
  bool penalties;
};

std::vector<Mix> mixes() {
  SamplingRow all;
  all.temperature = 0.8f;
  all.top_k = 50;
  all.top_p = 0.95f;
  all.min_p = 0.05f;
  all.repetition_penalty = 1.1f;
  all.presence_penalty = 0.3f;
  all.frequency_penalty = 0.3f;
  SamplingRow top_p;
  top_p.temperature = 1.0f;
  top_p.top_p = 0.9f;
  return {{"sample all filters", all, true}, {"sample top-p only", top_p, false}, {"sample greedy", SamplingRow{}, false}};
}

void run_mix(CudaBackend& backend, const Tensor& all_logits, const Mix& mix, int64_t num_rows, int runs,
             Report& report) {
  std::mt19937 rng(static_cast<uint32_t>(num_rows));
  std::vector<SamplingRow> rows(static_cast<size_t>(num_rows), mix.row);
  std::vector<int32_t> starts{0};
  std::vector<HistoryToken> history;
  for (int64_t r = 0; r < num_rows; ++r) {
    rows[static_cast<size_t>(r)].seed = rng();
    if (mix.penalties) {
      for (int32_t k = 0; k < 128; ++k) history.push_back(HistoryToken{k * 1999 % static_cast<int32_t>(kVocab), 1, k % 3});
    }
    starts.push_back(static_cast<int32_t>(history.size()));
  }
  SamplingBatch batch{rows, starts, history};
  if (!mix.penalties) batch.history_starts = {};
  const Tensor logits = all_logits.slice_rows(0, num_rows);
  const Tensor ids = backend.alloc(DType::kI32, Shape{num_rows});
  const int burst = 10;
  EventTimer timer(backend.stream());
  std::vector<double> ms;
  for (int i = 0; i < 1 + runs; ++i) {
    timer.start();
    for (int j = 0; j < burst; ++j) {
      for (SamplingRow& r : rows) ++r.counter;
      backend.sample(ids, logits, batch);
    }
    timer.stop();
    const double t = timer.elapsed_ms() / burst;
    if (i > 0) ms.push_back(t);
  }
  const double t = median(ms);
  const double bytes = static_cast<double>(num_rows * kVocab * 4);
  BenchRow row("sampling", mix.name, fmt::format("R={} V={}", num_rows, kVocab));
  row.time_ms = t;
  row.bytes_per_s = bytes / (t * 1e-3);
  row.details = {{"us_per_call", t * 1e3}, {"logits_bytes", bytes}, {"calls", runs * burst},
                 {"history_tokens", history.size()}};
  report.add(std::move(row));
}

}  // namespace

void run_sampling(const BenchOptions& options, Report& report) {
  CudaBackend backend;
  const int64_t max_rows = 128;
  // Logits like a model's: N(0, 2.5^2) with a few large ones, made once on the host.
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> host(static_cast<size_t>(max_rows * kVocab));
  for (float& x : host) x = normal(rng);
  for (int64_t r = 0; r < max_rows; ++r)
    for (int k = 0; k < 8; ++k) host[static_cast<size_t>(r * kVocab + rng() % kVocab)] = 14.0f + static_cast<float>(k);
  const Tensor logits = backend.upload(host.data(), DType::kF32, Shape{max_rows, kVocab});
  const int runs = options.timed_runs(7, 3);
  for (const Mix& mix : mixes()) {
    for (int64_t num_rows : {int64_t{1}, int64_t{8}, int64_t{32}, int64_t{128}}) {
      try {
        run_mix(backend, logits, mix, num_rows, runs, report);
      } catch (const std::exception& e) {
        report.add(BenchRow("sampling", mix.name, fmt::format("R={}", num_rows), fmt::format("error: {}", e.what())));
      }
    }
  }
}

}  // namespace tide::bench
