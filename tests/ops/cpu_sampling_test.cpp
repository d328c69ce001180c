// The sample op of the CPU backend, the reference: each penalty and filter on hand-made logits with the
// exact set of tokens it may draw, greedy ties, the order of the filters, the shared Philox generator
// (known-answer vectors), seed determinism and batch independence, and drawn frequencies against exact
// probabilities. Draws use fixed (seed, counter) pairs, so every count here is deterministic: the
// tolerances of the frequency checks (5 sigma) cannot flake.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "sampling_test_util.h"
#include "core/error.h"

namespace tide {
namespace {

using test::drawn;
using test::expect_frequencies;
using test::histogram;
using test::kSeed;
using test::logits_of;
using test::sample_one;
using test::sampled;

TEST(CpuSampling, PhiloxMatchesKnownAnswers) {
  // Random123's known-answer vectors for philox4x32_10.
  uint32_t zero[4] = {0, 0, 0, 0};
  sampling::philox4x32_10(zero, 0, 0);
  EXPECT_EQ(zero[0], 0x6627e8d5u);
  EXPECT_EQ(zero[1], 0xe169c58du);
  EXPECT_EQ(zero[2], 0xbc57ac4cu);
  EXPECT_EQ(zero[3], 0x9b00dbd8u);
  uint32_t ones[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
  sampling::philox4x32_10(ones, 0xffffffffu, 0xffffffffu);
  EXPECT_EQ(ones[0], 0x408f276du);
  EXPECT_EQ(ones[1], 0x41c83b0eu);
  EXPECT_EQ(ones[2], 0xa20bc7c6u);
  EXPECT_EQ(ones[3], 0x6d5451fdu);
  uint32_t pi[4] = {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u};
  sampling::philox4x32_10(pi, 0xa4093822u, 0x299f31d0u);
  EXPECT_EQ(pi[0], 0xd16cfe09u);
  EXPECT_EQ(pi[1], 0x94fdccebu);
  EXPECT_EQ(pi[2], 0x5001e420u);
  EXPECT_EQ(pi[3], 0x24126ea1u);
}

TEST(CpuSampling, ExpIsCloseToStdExpAndExactAtZero) {
  EXPECT_EQ(sampling::exp_nonpositive(0.0f), 1.0f);
  EXPECT_EQ(sampling::weight_of(1.0f), uint64_t{1} << 40);
  EXPECT_EQ(sampling::exp_nonpositive(-31.0f), 0.0f);
  for (float x = -29.9f; x <= 0; x += 0.01f) {
    EXPECT_NEAR(sampling::exp_nonpositive(x) / std::exp(double{x}), 1.0, 1e-6) << x;
  }
}

TEST(CpuSampling, OrderKeysSortLikeFloats) {
  const std::vector<float> v = {-INFINITY, -3.5f, -1e-30f, -0.0f, 0.0f, 1e-30f, 2.0f, 2.0000002f, INFINITY};
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    EXPECT_LT(sampling::order_key(v[i]), sampling::order_key(v[i + 1])) << v[i];
    EXPECT_EQ(sampling::key_float(sampling::order_key(v[i])), v[i]);
  }
}

TEST(CpuSampling, GreedyIsArgmaxLowestIdOnTies) {
  CpuBackend cpu;
  EXPECT_EQ(sample_one(cpu, {1, 3, 2}, SamplingRow{}), 1);
  EXPECT_EQ(sample_one(cpu, {5, 1, 5}, SamplingRow{}), 0);
  EXPECT_EQ(sample_one(cpu, {-2, -1, -1}, SamplingRow{}), 1);
  // Greedy ignores the filters, and its seed.
  SamplingRow r;
  r.top_k = 1;
  r.top_p = 0.1f;
  r.seed = 99;
  EXPECT_EQ(sample_one(cpu, {0, 1, 4, 2}, r), 2);
}

TEST(CpuSampling, PenaltiesRewriteTheSeenLogits) {
  CpuBackend cpu;
  const std::vector<float> values = {2.0f, -1.0f, 3.0f, 0.5f, 1.0f};
  Tensor l = cpu.upload(values.data(), DType::kF32, Shape{1, 5});
  Tensor ids = cpu.alloc(DType::kI32, Shape{1});
  SamplingRow r;  // greedy
  r.repetition_penalty = 2.0f;
  r.presence_penalty = 0.5f;
  r.frequency_penalty = 0.25f;
  // Token 0 in the prompt; 1 in prompt and output; 2 twice in the output; 3 and 4 never seen.
  const std::vector<HistoryToken> history = {{0, 1, 0}, {1, 2, 1}, {2, 0, 2}};
  const int32_t starts[2] = {0, 3};
  cpu.sample(ids, l, SamplingBatch{std::span(&r, 1), starts, history});
  const float* got = l.as<float>();
  EXPECT_EQ(got[0], 1.0f);                        // 2 / 2
  EXPECT_EQ(got[1], -1.0f * 2 - (0.25f + 0.5f));  // negative: times 2, then frequency 1 and presence
  EXPECT_EQ(got[2], 3.0f / 2 - (0.5f + 0.5f));    // 1.5 - (2 * 0.25 + 0.5)
  EXPECT_EQ(got[3], 0.5f);
  EXPECT_EQ(got[4], 1.0f);
  EXPECT_EQ(ids.as<int32_t>()[0], 0);  // 1.0 (token 0) ties 1.0 (token 4): lowest id
}

TEST(CpuSampling, RepetitionPenaltyBelowOneFavoursSeenTokens) {
  CpuBackend cpu;
  SamplingRow r;
  r.repetition_penalty = 0.5f;
  EXPECT_EQ(sample_one(cpu, {2.0f, 1.5f}, r, {{1, 1, 0}}), 1);  // 1.5 / 0.5 = 3
}

TEST(CpuSampling, TopKKeepsEveryTokenTiedWithTheKth) {
  const std::vector<float> l = {0.0f, 3.0f, 1.0f, 2.9f, 3.0f, 2.9f};
  SamplingRow r = sampled();
  r.top_k = 2;  // the 2nd largest is 3.0: tokens 1 and 4
  EXPECT_EQ(drawn(histogram(l, r, 400)), (std::set<int32_t>{1, 4}));
  r.top_k = 3;  // the 3rd largest is 2.9: its tie (token 5) is kept too
  EXPECT_EQ(drawn(histogram(l, r, 600)), (std::set<int32_t>{1, 3, 4, 5}));
  r.top_k = 6;  // k >= V: off
  EXPECT_EQ(drawn(histogram(l, r, 2000)).size(), 6u);
}

TEST(CpuSampling, TopPKeepsTheSmallestHeadReachingTheMass) {
  const std::vector<float> l = logits_of({0.5, 0.3, 0.2});
  SamplingRow r = sampled();
  r.top_p = 0.4f;
  EXPECT_EQ(drawn(histogram(l, r, 300)), (std::set<int32_t>{0}));
  r.top_p = 0.75f;
  const auto counts = histogram(l, r, 4000);
  EXPECT_EQ(drawn(counts), (std::set<int32_t>{0, 1}));
  expect_frequencies(counts, {0.5 / 0.8, 0.3 / 0.8}, 4000);  // renormalized over the kept mass
  r.top_p = 0.85f;
  EXPECT_EQ(drawn(histogram(l, r, 1000)), (std::set<int32_t>{0, 1, 2}));
}

TEST(CpuSampling, TopPRunsOnWhatTopKKept) {
  // 0.4, 0.3, 0.2, 0.1: top-k 3 leaves 0.444, 0.333, 0.222; top_p 0.75 then keeps two (0.777). Without
  // top-k, top_p 0.75 needs three (0.7 < 0.75).
  const std::vector<float> l = logits_of({0.4, 0.3, 0.2, 0.1});
  SamplingRow r = sampled();
  r.top_p = 0.75f;
  EXPECT_EQ(drawn(histogram(l, r, 1000)), (std::set<int32_t>{0, 1, 2}));
  r.top_k = 3;
  EXPECT_EQ(drawn(histogram(l, r, 1000)), (std::set<int32_t>{0, 1}));
}

TEST(CpuSampling, MinPIsRelativeToTheMostLikelyAfterTemperature) {
  const std::vector<float> l = logits_of({0.5, 0.3, 0.2});  // relative 1, 0.6, 0.4
  SamplingRow r = sampled();
  r.min_p = 0.5f;
  EXPECT_EQ(drawn(histogram(l, r, 1000)), (std::set<int32_t>{0, 1}));
  r.temperature = 2.0f;  // relative sqrt(0.6) = 0.77, sqrt(0.4) = 0.63
  r.min_p = 0.7f;
  EXPECT_EQ(drawn(histogram(l, r, 1000)), (std::set<int32_t>{0, 1}));
  r.min_p = 0.6f;
  EXPECT_EQ(drawn(histogram(l, r, 1000)), (std::set<int32_t>{0, 1, 2}));
}

TEST(CpuSampling, FrequenciesMatchExactProbabilities) {
  const std::vector<double> probs = {0.1, 0.2, 0.3, 0.4};
  const std::vector<float> l = logits_of(probs);
  const int draws = 20000;
  expect_frequencies(histogram(l, sampled(1.0f), draws), probs, draws);
  // Temperature 2: p^(1/2), renormalized.
  std::vector<double> flat;
  double total = 0;
  for (double p : probs) total += std::sqrt(p);
  for (double p : probs) flat.push_back(std::sqrt(p) / total);
  expect_frequencies(histogram(l, sampled(2.0f), draws), flat, draws);
  // A presence penalty of log(2) on token 3 (in the output) halves its weight: 0.2 of 0.8.
  SamplingRow r = sampled();
  r.presence_penalty = static_cast<float>(std::log(2.0));
  expect_frequencies(histogram(l, r, draws, {{3, 0, 1}}), {0.125, 0.25, 0.375, 0.25}, draws);
}

TEST(CpuSampling, SameSeedAndCounterSameTokenWhateverTheBatch) {
  CpuBackend cpu;
  const int64_t vocab = 50;
  std::vector<float> values;
  for (int64_t i = 0; i < 4 * vocab; ++i) values.push_back(static_cast<float>(std::sin(0.37 * i) * 3));
  std::vector<SamplingRow> rows(4, sampled());
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].seed = 100 + i;
    rows[i].counter = 7 * i;
  }
  rows[1].top_k = 5;
  rows[2].top_p = 0.8f;
  rows[3].min_p = 0.1f;
  Tensor l = cpu.upload(values.data(), DType::kF32, Shape{4, vocab});
  Tensor ids = cpu.alloc(DType::kI32, Shape{4});
  cpu.sample(ids, l, SamplingBatch{rows, {}, {}});
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::vector<float> row(values.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                                 values.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
    EXPECT_EQ(sample_one(cpu, row, rows[i]), ids.as<int32_t>()[i]) << "row " << i;
  }
  // Another seed or counter gives other draws.
  std::vector<int32_t> a, b, c;
  SamplingRow r = sampled();
  const std::vector<float> flat(vocab, 0.0f);
  for (uint64_t n = 0; n < 40; ++n) {
    r.counter = n;
    r.seed = kSeed;
    a.push_back(sample_one(cpu, flat, r));
    b.push_back(sample_one(cpu, flat, r));
    r.seed = kSeed + 1;
    c.push_back(sample_one(cpu, flat, r));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 20u);  // draws advance with the counter
}

// --- logit bias ---

TEST(CpuSampling, BiasChangesTheGreedyChoice) {
  CpuBackend cpu;
  const std::vector<float> l = {1.0f, 3.0f, 2.0f};
  EXPECT_EQ(sample_one(cpu, l, SamplingRow{}), 1);
  EXPECT_EQ(sample_one(cpu, l, SamplingRow{}, {{2, 0, 0, 1.5f}}), 2);   // 3.5 > 3
  EXPECT_EQ(sample_one(cpu, l, SamplingRow{}, {{2, 0, 0, 1.0f}}), 1);   // 3 ties 3: the lower id
  EXPECT_EQ(sample_one(cpu, l, SamplingRow{}, {{1, 0, 0, -1.5f}}), 2);  // 1.5 < 2
  EXPECT_EQ(sample_one(cpu, l, SamplingRow{}, {{1, 0, 0, -INFINITY}}), 2);
  EXPECT_EQ(sample_one(cpu, l, SamplingRow{}, {{1, 0, 0, -INFINITY}, {2, 0, 0, -INFINITY}}), 0);
  // -inf logits as given lose to any finite one.
  EXPECT_EQ(sample_one(cpu, {-INFINITY, -1e30f, -INFINITY}, SamplingRow{}), 1);
}

TEST(CpuSampling, BannedTokenIsNeverDrawnWhateverTheFilters) {
  const std::vector<float> l = logits_of({0.5, 0.3, 0.2});
  const std::vector<HistoryToken> ban = {{0, 0, 0, -INFINITY}};
  SamplingRow r = sampled();
  EXPECT_EQ(drawn(histogram(l, r, 500)), (std::set<int32_t>{0, 1, 2}));
  EXPECT_EQ(drawn(histogram(l, r, 500, ban)), (std::set<int32_t>{1, 2}));
  r.top_k = 1;  // the largest left is token 1
  EXPECT_EQ(drawn(histogram(l, r, 300, ban)), (std::set<int32_t>{1}));
  r.top_k = 2;
  EXPECT_EQ(drawn(histogram(l, r, 500, ban)), (std::set<int32_t>{1, 2}));
  r.top_k = 0;
  r.top_p = 0.5f;  // 0.6 and 0.4 of what is left: the first reaches half
  EXPECT_EQ(drawn(histogram(l, r, 300, ban)), (std::set<int32_t>{1}));
  r.top_p = 1.0f;
  r.min_p = 0.5f;  // relative 1 and 2/3
  EXPECT_EQ(drawn(histogram(l, r, 500, ban)), (std::set<int32_t>{1, 2}));
  r.top_k = 3;
  r.top_p = 0.9f;
  r.min_p = 0.7f;
  EXPECT_EQ(drawn(histogram(l, r, 300, ban)), (std::set<int32_t>{1}));
  // Banned tokens in the logits as given behave the same; the rest keep their relative frequencies.
  const int draws = 20000;
  const auto counts = histogram({-INFINITY, l[1], -INFINITY, l[2]}, sampled(), draws);
  EXPECT_EQ(drawn(counts), (std::set<int32_t>{1, 3}));
  expect_frequencies(counts, {0.0, 0.6, 0.0, 0.4}, draws);
}

TEST(CpuSampling, BiasScalesTheDrawnFrequencies) {
  // A bias of log(2) on token 0 doubles its weight: 0.2, 0.2, 0.3, 0.4 of 1.1.
  const std::vector<float> l = logits_of({0.1, 0.2, 0.3, 0.4});
  const int draws = 20000;
  const std::vector<HistoryToken> bias = {{0, 0, 0, static_cast<float>(std::log(2.0))}};
  expect_frequencies(histogram(l, sampled(), draws, bias), {0.2 / 1.1, 0.2 / 1.1, 0.3 / 1.1, 0.4 / 1.1}, draws);
}

TEST(CpuSampling, RowOfMinusInfinityGivesIdZero) {
  CpuBackend cpu;
  const std::vector<float> l(5, -INFINITY);
  EXPECT_EQ(sample_one(cpu, l, SamplingRow{}), 0);
  SamplingRow r = sampled();
  EXPECT_EQ(sample_one(cpu, l, r), 0);
  r.top_k = 2;
  r.top_p = 0.5f;
  r.min_p = 0.1f;
  EXPECT_EQ(sample_one(cpu, l, r), 0);
  // Every token banned by the bias, with penalties too: the logits stay -inf, never NaN.
  const std::vector<float> finite = {1, 2, 3};
  r.repetition_penalty = 1.5f;
  r.presence_penalty = 0.5f;
  r.frequency_penalty = -0.5f;
  const std::vector<HistoryToken> ban = {{0, 1, 0, -INFINITY}, {1, 0, 2, -INFINITY}, {2, 0, 0, -INFINITY}};
  Tensor t = cpu.upload(finite.data(), DType::kF32, Shape{1, 3});
  Tensor ids = cpu.alloc(DType::kI32, Shape{1});
  const int32_t starts[2] = {0, 3};
  cpu.sample(ids, t, SamplingBatch{std::span(&r, 1), starts, ban});
  EXPECT_EQ(ids.as<int32_t>()[0], 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t.as<float>()[i], -INFINITY) << i;
}

TEST(CpuSampling, BiasIsAddedBeforeThePenalties) {
  CpuBackend cpu;
  const std::vector<float> values = {2.0f, 1.0f, 0.5f, 3.0f, -0.0f, 4.0f};
  Tensor l = cpu.upload(values.data(), DType::kF32, Shape{1, 6});
  Tensor ids = cpu.alloc(DType::kI32, Shape{1});
  SamplingRow r;  // greedy
  r.repetition_penalty = 2.0f;
  r.presence_penalty = 0.5f;
  r.frequency_penalty = 0.25f;
  const std::vector<HistoryToken> history = {
      {0, 1, 0, -1.0f},  // prompt: (2 - 1) / 2 (the other order would give 2 / 2 - 1 = 0)
      {1, 0, 1, 2.0f},   // output: (1 + 2) / 2 - (0.25 + 0.5)
      {2, 0, 0, 0.25f},  // bias only: no penalty
      {3, 2, 0, 0.0f},   // counts only: 3 / 2
      {4, 0, 0, 0.0f},   // neither: -0 stays -0 (no add)
      {5, 0, 0, -INFINITY},
  };
  const int32_t starts[2] = {0, 6};
  cpu.sample(ids, l, SamplingBatch{std::span(&r, 1), starts, history});
  const float* got = l.as<float>();
  EXPECT_EQ(got[0], 0.5f);
  EXPECT_EQ(got[1], 0.75f);
  EXPECT_EQ(got[2], 0.75f);
  EXPECT_EQ(got[3], 1.5f);
  EXPECT_EQ(got[4], 0.0f);
  EXPECT_TRUE(std::signbit(got[4]));
  EXPECT_EQ(got[5], -INFINITY);
  EXPECT_EQ(ids.as<int32_t>()[0], 3);  // 4.0 was banned; 1.5 is the largest left
  // The shared helper is what both backends run.
  EXPECT_EQ(sampling::adjusted_logit(2.0f, HistoryToken{0, 1, 0, -1.0f}, r), 0.5f);
}

TEST(CpuSampling, RejectsNanAndPlusInfinityBiasNamingRowAndToken) {
  CpuBackend cpu;
  Tensor l = cpu.alloc(DType::kF32, Shape{2, 4});
  Tensor ids = cpu.alloc(DType::kI32, Shape{2});
  const std::vector<SamplingRow> rows(2);
  auto message = [&](float bias) {
    const std::vector<HistoryToken> h = {{1, 0, 0, 1.0f}, {0, 1, 0, 0.0f}, {2, 0, 1, bias}};
    const std::vector<int32_t> starts = {0, 1, 3};
    try {
      cpu.sample(ids, l, SamplingBatch{rows, starts, h});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (float bad : {NAN, INFINITY}) {
    const std::string m = message(bad);
    EXPECT_NE(m.find("bias"), std::string::npos) << m;
    EXPECT_NE(m.find("row 1"), std::string::npos) << m;
    EXPECT_NE(m.find("token 2"), std::string::npos) << m;
  }
  EXPECT_EQ(message(-INFINITY), "no error");
  EXPECT_EQ(message(-100.0f), "no error");
  EXPECT_EQ(message(100.0f), "no error");
  EXPECT_EQ(message(-3e38f), "no error");
}

TEST(CpuSampling, RejectsBadBatchesNamingTheField) {
  CpuBackend cpu;
  Tensor l = cpu.alloc(DType::kF32, Shape{1, 4});
  Tensor ids = cpu.alloc(DType::kI32, Shape{1});
  auto message = [&](SamplingRow r, std::vector<int32_t> starts = {}, std::vector<HistoryToken> h = {}) {
    try {
      cpu.sample(ids, l, SamplingBatch{std::span(&r, 1), starts, h});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  SamplingRow r;
  r.top_p = 0;
  EXPECT_NE(message(r).find("top_p"), std::string::npos);
  r = {};
  r.min_p = 1.5f;
  EXPECT_NE(message(r).find("min_p"), std::string::npos);
  r = {};
  r.repetition_penalty = 0;
  EXPECT_NE(message(r).find("repetition_penalty"), std::string::npos);
  r = {};
  r.temperature = -1;
  EXPECT_NE(message(r).find("temperature"), std::string::npos);
  EXPECT_NE(message(SamplingRow{}, {0, 1}, {{4, 1, 0}}).find("out of range"), std::string::npos);
  EXPECT_NE(message(SamplingRow{}, {0, 2}, {{1, 1, 0}}).find("history_starts"), std::string::npos);
  EXPECT_EQ(message(SamplingRow{}, {0, 1}, {{3, 1, 0}}), "no error");
}

}  // namespace
}  // namespace tide
