// Sampler: greedy, seeded reproducibility, and what top-k / top-p / temperature allow to be drawn.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/error.h"
#include "runtime/sampler.h"

namespace tide {
namespace {

std::map<int32_t, int> histogram(const SamplingParams& params, const std::vector<float>& logits, int draws) {
  Sampler sampler(params);
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i) ++counts[sampler.sample(logits)];
  return counts;
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler sampler(SamplingParams{});
  EXPECT_EQ(sampler.sample(std::vector<float>{1, 3, 2}), 1);
  EXPECT_EQ(sampler.sample(std::vector<float>{5, 1, 5}), 0);
}

TEST(Sampler, SameSeedSameTokens) {
  const std::vector<float> logits{0.1f, 0.5f, 0.2f, 0.4f, 0.3f};
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = 1234;
  Sampler a(p), b(p);
  std::vector<int32_t> xa, xb;
  for (int i = 0; i < 50; ++i) {
    xa.push_back(a.sample(logits));
    xb.push_back(b.sample(logits));
  }
  EXPECT_EQ(xa, xb);
  p.seed = 99;
  Sampler c(p);
  std::vector<int32_t> xc;
  for (int i = 0; i < 50; ++i) xc.push_back(c.sample(logits));
  EXPECT_NE(xa, xc);
}

TEST(Sampler, TopKKeepsOnlyTheKBest) {
  SamplingParams p;
  p.temperature = 1.0;
  p.top_k = 2;
  p.seed = 7;
  const auto counts = histogram(p, {0.0f, 3.0f, 1.0f, 2.9f}, 2000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_TRUE(counts.count(1) && counts.count(3));
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingTheMass) {
  // Probabilities 0.5, 0.3, 0.2 (logits are their logs): top_p 0.7 keeps the first two.
  SamplingParams p;
  p.temperature = 1.0;
  p.top_p = 0.7;
  p.seed = 3;
  const auto counts = histogram(p, {std::log(0.5f), std::log(0.3f), std::log(0.2f)}, 4000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts.count(2), 0u);
  EXPECT_NEAR(counts.at(0) / 4000.0, 0.5 / 0.8, 0.04);  // renormalized over the kept mass
}

TEST(Sampler, TemperatureSharpensTheDistribution) {
  SamplingParams p;
  p.temperature = 0.05;
  p.seed = 5;
  const auto counts = histogram(p, {1.0f, 1.2f, 0.9f}, 500);
  EXPECT_GT(counts.at(1), 490);
}

TEST(Sampler, RejectsOutOfRangeParameters) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.top_p = 0;
  EXPECT_THROW(p.validate(), Error);
  p = {};
  p.top_k = -2;
  EXPECT_THROW(p.validate(), Error);
}

}  // namespace
}  // namespace tide
