// tide bench serve's workloads: prompt and output lengths within vLLM's ranges, ids within the vocabulary above
// the special ids, shared prefixes shared (and group prefixes only within their group), the same prompts and
// arrival times for the same seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "apps/tide/bench_serve/workload.h"
#include "core/error.h"

namespace tide::bench {
namespace {

TEST(BenchWorkload, LengthRangesAreVllms) {
  EXPECT_EQ(length_range(1024, 0, 0).low, 1024);
  EXPECT_EQ(length_range(1024, 0, 0).high, 1024);
  EXPECT_EQ(length_range(10, 0.25, 1).low, 7);    // floor(7.5)
  EXPECT_EQ(length_range(10, 0.25, 1).high, 13);  // ceil(12.5)
  EXPECT_EQ(length_range(1, 0.5, 1).low, 1);      // floor(0.5) = 0, raised to the minimum
  EXPECT_EQ(length_range(1, 0.5, 1).high, 2);
  EXPECT_EQ(first_token_id(256000), 256);
  EXPECT_EQ(first_token_id(512), 256);
  EXPECT_EQ(first_token_id(300), 0);
}

TEST(BenchWorkload, RandomPromptsStayWithinTheirRanges) {
  WorkloadOptions o;
  o.num_prompts = 500;
  o.input_len = 100;
  o.output_len = 10;
  o.range_ratio = 0.25;
  o.prefix_len = 20;
  o.vocab_size = 1000;
  o.seed = 7;
  const std::vector<BenchPrompt> prompts = make_workload(o);
  ASSERT_EQ(prompts.size(), 500u);
  std::set<size_t> input_lens;
  std::set<int64_t> output_lens;
  for (const BenchPrompt& p : prompts) {
    EXPECT_EQ(p.num_shared, 20);
    EXPECT_EQ(p.group, 0);
    EXPECT_GE(p.ids.size(), 20u + 75u);
    EXPECT_LE(p.ids.size(), 20u + 125u);
    EXPECT_GE(p.max_tokens, 7);
    EXPECT_LE(p.max_tokens, 13);
    input_lens.insert(p.ids.size());
    output_lens.insert(p.max_tokens);
    for (int32_t id : p.ids) {
      ASSERT_GE(id, 256);
      ASSERT_LT(id, 1000);
    }
    // The common prefix is the same in every prompt.
    EXPECT_TRUE(std::equal(p.ids.begin(), p.ids.begin() + 20, prompts[0].ids.begin()));
  }
  EXPECT_GT(input_lens.size(), 10u);   // lengths spread over the range, not one value
  EXPECT_EQ(output_lens.size(), 7u);   // 7..13, each drawn among 500 prompts
  // The parts after the prefix differ between prompts.
  EXPECT_FALSE(std::equal(prompts[0].ids.begin() + 20, prompts[0].ids.begin() + 40, prompts[1].ids.begin() + 20));
}

TEST(BenchWorkload, FixedLengthsWithoutRatio) {
  WorkloadOptions o;
  o.num_prompts = 8;
  o.input_len = 16;
  o.output_len = 8;
  o.vocab_size = 1024;
  for (const BenchPrompt& p : make_workload(o)) {
    EXPECT_EQ(p.ids.size(), 16u);
    EXPECT_EQ(p.max_tokens, 8);
    EXPECT_EQ(p.num_shared, 0);
  }
}

TEST(BenchWorkload, SharedPrefixGroups) {
  WorkloadOptions o;
  o.dataset = Dataset::kSharedPrefix;
  o.num_prompts = 12;
  o.input_len = 8;
  o.output_len = 4;
  o.prefix_len = 5;
  o.num_groups = 3;
  o.group_prefix_len = 10;
  o.vocab_size = 32000;
  const std::vector<BenchPrompt> prompts = make_workload(o);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const BenchPrompt& p = prompts[i];
    EXPECT_EQ(p.group, static_cast<int64_t>(i % 3));
    EXPECT_EQ(p.num_shared, 15);
    EXPECT_EQ(p.ids.size(), 23u);
    const BenchPrompt& leader = prompts[i % 3];
    EXPECT_TRUE(std::equal(p.ids.begin(), p.ids.begin() + 15, leader.ids.begin())) << i;  // its group's prefix
    EXPECT_TRUE(std::equal(p.ids.begin(), p.ids.begin() + 5, prompts[0].ids.begin())) << i;  // the common one
    if (i >= 3) {
      EXPECT_FALSE(std::equal(p.ids.begin() + 15, p.ids.end(), leader.ids.begin() + 15)) << i;
    }
  }
  // Different groups, different group prefixes.
  EXPECT_FALSE(std::equal(prompts[0].ids.begin() + 5, prompts[0].ids.begin() + 15, prompts[1].ids.begin() + 5));
  EXPECT_FALSE(std::equal(prompts[1].ids.begin() + 5, prompts[1].ids.begin() + 15, prompts[2].ids.begin() + 5));
}

TEST(BenchWorkload, TheSeedNamesTheWorkload) {
  WorkloadOptions o;
  o.num_prompts = 20;
  o.input_len = 50;
  o.output_len = 20;
  o.range_ratio = 0.5;
  o.vocab_size = 5000;
  o.seed = 3;
  auto ids = [](const std::vector<BenchPrompt>& prompts) {
    std::vector<std::vector<int32_t>> out;
    for (const BenchPrompt& p : prompts) out.push_back(p.ids);
    return out;
  };
  const auto a = make_workload(o), b = make_workload(o);
  EXPECT_EQ(ids(a), ids(b));
  o.seed = 4;
  EXPECT_NE(ids(a), ids(make_workload(o)));
}

TEST(BenchWorkload, RefusesImpossibleOptions) {
  WorkloadOptions o;
  o.num_prompts = 1;
  o.input_len = 4;
  o.output_len = 4;
  o.vocab_size = 0;
  EXPECT_THROW(make_workload(o), Error);  // vocabulary unknown
  o.vocab_size = 100;
  o.range_ratio = 1.0;
  EXPECT_THROW(make_workload(o), Error);
  o.range_ratio = 0;
  o.input_len = 0;
  EXPECT_THROW(make_workload(o), Error);  // empty prompts
  o.prefix_len = 1;
  EXPECT_NO_THROW(make_workload(o));
}

TEST(BenchWorkload, ArrivalTimes) {
  EXPECT_EQ(arrival_times(3, INFINITY, 1.0, 0), (std::vector<double>{0, 0, 0}));
  // Poisson at 10 requests/s: ascending, after the start, the last at n / rate.
  const std::vector<double> poisson = arrival_times(50, 10.0, 1.0, 0);
  ASSERT_EQ(poisson.size(), 50u);
  EXPECT_GT(poisson.front(), 0);
  EXPECT_TRUE(std::is_sorted(poisson.begin(), poisson.end()));
  EXPECT_NEAR(poisson.back(), 5.0, 1e-9);
  EXPECT_EQ(arrival_times(50, 10.0, 1.0, 0), poisson);
  EXPECT_NE(arrival_times(50, 10.0, 1.0, 1), poisson);
  EXPECT_NE(arrival_times(50, 10.0, 0.5, 0), poisson);
  // Infinite burstiness: evenly spaced.
  const std::vector<double> even = arrival_times(4, 2.0, INFINITY, 0);
  for (size_t i = 0; i < even.size(); ++i) EXPECT_NEAR(even[i], 0.5 * static_cast<double>(i + 1), 1e-12);
  EXPECT_THROW(arrival_times(4, 0.0, 1.0, 0), Error);
  EXPECT_THROW(arrival_times(4, 1.0, 0.0, 0), Error);
}

}  // namespace
}  // namespace tide::bench
