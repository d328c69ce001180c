// Helpers of the CPU sample op's tests: fixed-seed rows, single draws, histograms over counters, logits of
// given probabilities and frequency checks within 5 binomial standard deviations (deterministic counts: the
// draws use fixed (seed, counter) pairs).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace tide::test {

inline constexpr uint64_t kSeed = 20261202;

inline SamplingRow sampled(float temperature = 1.0f) {
  SamplingRow r;
  r.temperature = temperature;
  r.seed = kSeed;
  return r;
}

// One draw of `row` on `logits` (a fresh copy each time: the op overwrites them).
inline int32_t sample_one(CpuBackend& cpu, const std::vector<float>& logits, const SamplingRow& row,
                   const std::vector<HistoryToken>& history = {}) {
  Tensor l = cpu.upload(logits.data(), DType::kF32, Shape{1, static_cast<int64_t>(logits.size())});
  Tensor ids = cpu.alloc(DType::kI32, Shape{1});
  const int32_t starts[2] = {0, static_cast<int32_t>(history.size())};
  SamplingBatch batch{std::span(&row, 1), {}, history};
  if (!history.empty()) batch.history_starts = starts;
  cpu.sample(ids, l, batch);
  return ids.as<int32_t>()[0];
}

// How often each id is drawn in `draws` draws (counters 0 .. draws - 1).
inline std::map<int32_t, int> histogram(const std::vector<float>& logits, SamplingRow row, int draws,
                                 const std::vector<HistoryToken>& history = {}) {
  CpuBackend cpu;
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) {
    row.counter = static_cast<uint64_t>(i);
    ++counts[sample_one(cpu, logits, row, history)];
  }
  return counts;
}

inline std::set<int32_t> drawn(const std::map<int32_t, int>& counts) {
  std::set<int32_t> ids;
  for (const auto& [id, n] : counts) ids.insert(id);
  return ids;
}

// Logits whose softmax is `probs`.
inline std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// |frequency - p| within 5 standard deviations of a binomial proportion.
inline void expect_frequencies(const std::map<int32_t, int>& counts, const std::vector<double>& probs, int draws) {
  for (size_t i = 0; i < probs.size(); ++i) {
    const double got = counts.count(static_cast<int32_t>(i)) ? counts.at(static_cast<int32_t>(i)) / double(draws) : 0.0;
    const double sigma = std::sqrt(probs[i] * (1 - probs[i]) / draws);
    EXPECT_NEAR(got, probs[i], 5 * sigma + 1e-12) << "token " << i;
  }
}

}  // namespace tide::test
