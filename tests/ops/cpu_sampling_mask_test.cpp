// The sample op's allowed-token masks (structured outputs) on the CPU reference: a constrained row draws only
// allowed tokens, in the proportions of the model's distribution renormalized over them; greedy picks the best
// allowed token; no bias revives a disallowed one (a forced bias included); rows without a mask are untouched
// by their neighbours' masks; malformed masks are refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "runtime/sampling.h"

namespace tide {
namespace {

// Draws rows over `logits` ([R, V]) with `index` into `masks`; returns the ids.
std::vector<int32_t> sample_masked(const std::vector<float>& logits, int64_t vocab, std::vector<SamplingRow> rows,
                                   const std::vector<int32_t>& index, const std::vector<uint32_t>& masks,
                                   const std::vector<HistoryToken>& history = {}) {
  CpuBackend cpu;
  const auto num_rows = static_cast<int64_t>(rows.size());
  Tensor l = cpu.upload(logits.data(), DType::kF32, Shape{num_rows, vocab});
  Tensor ids = cpu.alloc(DType::kI32, Shape{num_rows});
  std::vector<int32_t> starts;
  SamplingBatch batch{rows, {}, history, index, masks};
  if (!history.empty()) {
    starts.assign(static_cast<size_t>(num_rows + 1), static_cast<int32_t>(history.size()));
    starts[0] = 0;
    batch.history_starts = starts;
  }
  cpu.sample(ids, l, batch);
  return std::vector<int32_t>(ids.as<int32_t>(), ids.as<int32_t>() + num_rows);
}

std::vector<uint32_t> mask_of(int64_t vocab, std::initializer_list<int32_t> allowed) {
  std::vector<uint32_t> words(static_cast<size_t>(mask_words(vocab)), 0);
  for (int32_t id : allowed) words[static_cast<size_t>(id / 32)] |= 1u << (id % 32);
  return words;
}

TEST(CpuSamplingMask, GreedyPicksTheBestAllowedToken) {
  const int64_t vocab = 70;  // three words, the last partial
  std::vector<float> logits(vocab);
  for (int64_t i = 0; i < vocab; ++i) logits[static_cast<size_t>(i)] = static_cast<float>(i % 17);
  SamplingRow greedy;
  const std::vector<uint32_t> mask = mask_of(vocab, {3, 40, 65});  // logits 3, 6, 14
  EXPECT_EQ(sample_masked(logits, vocab, {greedy}, {0}, mask), std::vector<int32_t>{65});
  // A +100 bias or the forced bias on a disallowed token does not bring it back.
  const std::vector<HistoryToken> bias = {{16, 0, 0, 100.0f}, {33, 0, 0, kForcedTokenBias}};
  EXPECT_EQ(sample_masked(logits, vocab, {greedy}, {0}, mask, bias), std::vector<int32_t>{65});
  // A bias among the allowed ones still counts.
  EXPECT_EQ(sample_masked(logits, vocab, {greedy}, {0}, mask, {{3, 0, 0, 50.0f}}), std::vector<int32_t>{3});
}

TEST(CpuSamplingMask, SampledRowsFollowTheRenormalizedDistribution) {
  const int64_t vocab = 40;
  std::vector<float> logits(vocab, 0.0f);
  logits[5] = std::log(0.2f), logits[9] = std::log(0.6f), logits[30] = 8.0f;  // 30: likely but not allowed
  const std::vector<uint32_t> mask = mask_of(vocab, {5, 9});
  std::map<int32_t, int> counts;
  const int draws = 4000;
  for (int i = 0; i < draws; ++i) {
    SamplingRow row;
    row.temperature = 1.0f;
    row.seed = 7;
    row.counter = static_cast<uint64_t>(i);
    ++counts[sample_masked(logits, vocab, {row}, {0}, mask)[0]];
  }
  ASSERT_EQ(counts.size(), 2u);
  const double p5 = 0.2 / 0.8;
  EXPECT_NEAR(counts[5] / double(draws), p5, 5 * std::sqrt(p5 * (1 - p5) / draws));
}

TEST(CpuSamplingMask, UnmaskedRowsAndSharedMasks) {
  const int64_t vocab = 100;
  std::vector<float> logits(static_cast<size_t>(3 * vocab), 0.0f);
  for (int r = 0; r < 3; ++r) logits[static_cast<size_t>(r * vocab + 50)] = 5.0f;  // the favourite, everywhere
  std::vector<uint32_t> masks = mask_of(vocab, {7});
  const std::vector<uint32_t> second = mask_of(vocab, {8, 50});
  masks.insert(masks.end(), second.begin(), second.end());
  // Row 0 free, rows 1 and 2 on masks 1 and 0.
  EXPECT_EQ(sample_masked(logits, vocab, {SamplingRow{}, SamplingRow{}, SamplingRow{}}, {-1, 1, 0}, masks),
            (std::vector<int32_t>{50, 50, 7}));
  // No allowed token: the row has no distribution, id 0 (the engine never builds such a mask).
  EXPECT_EQ(sample_masked(logits, vocab, {SamplingRow{}}, {0}, std::vector<uint32_t>(4, 0)),
            std::vector<int32_t>{0});
}

TEST(CpuSamplingMask, MalformedMasksAreRefused) {
  const int64_t vocab = 64;
  const std::vector<float> logits(static_cast<size_t>(2 * vocab), 0.0f);
  const std::vector<uint32_t> one = mask_of(vocab, {1});
  EXPECT_THROW(sample_masked(logits, vocab, {SamplingRow{}, SamplingRow{}}, {0}, one), Error);        // one index
  EXPECT_THROW(sample_masked(logits, vocab, {SamplingRow{}, SamplingRow{}}, {0, 1}, one), Error);     // no mask 1
  EXPECT_THROW(sample_masked(logits, vocab, {SamplingRow{}, SamplingRow{}}, {0, -2}, one), Error);
  EXPECT_THROW(sample_masked(logits, vocab, {SamplingRow{}, SamplingRow{}}, {0, 0}, {1, 2, 3}), Error);  // 1.5 masks
}

}  // namespace
}  // namespace tide
