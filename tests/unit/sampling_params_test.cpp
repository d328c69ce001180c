// SamplingParams (validation naming the parameter, the op row it becomes) and TokenHistory (distinct
// tokens with prompt and output counts). The sampling itself is the backend op: tests/ops/cpu_sampling_test.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/sampling.h"

namespace tide {
namespace {

std::string error_of(const SamplingParams& p) {
  try {
    p.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SamplingParams, RejectsOutOfRangeValuesNamingTheParameter) {
  EXPECT_EQ(error_of(SamplingParams{}), "");
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(error_of(p).find("temperature"), std::string::npos);
  p = {};
  p.top_p = 0;
  EXPECT_NE(error_of(p).find("top_p"), std::string::npos);
  p = {};
  p.top_k = -2;
  EXPECT_NE(error_of(p).find("top_k"), std::string::npos);
  p = {};
  p.min_p = 1.01;
  EXPECT_NE(error_of(p).find("min_p"), std::string::npos);
  p = {};
  p.repetition_penalty = 0;
  EXPECT_NE(error_of(p).find("repetition_penalty"), std::string::npos);
  p = {};
  p.presence_penalty = 2.5;
  EXPECT_NE(error_of(p).find("presence_penalty"), std::string::npos);
  p = {};
  p.frequency_penalty = -3;
  EXPECT_NE(error_of(p).find("frequency_penalty"), std::string::npos);
}

TEST(SamplingParams, RowCarriesEveryParameterAndTheStream) {
  SamplingParams p;
  p.temperature = 0.7;
  p.top_k = int64_t{1} << 40;  // clamped: off either way
  p.top_p = 0.9;
  p.min_p = 0.05;
  p.repetition_penalty = 1.1;
  p.presence_penalty = 0.5;
  p.frequency_penalty = -0.25;
  EXPECT_TRUE(p.has_penalties());
  EXPECT_FALSE(SamplingParams{}.has_penalties());
  const SamplingRow r = p.row(42, 7);
  EXPECT_EQ(r.temperature, 0.7f);
  EXPECT_EQ(r.top_k, INT32_MAX);
  EXPECT_EQ(r.top_p, 0.9f);
  EXPECT_EQ(r.min_p, 0.05f);
  EXPECT_EQ(r.repetition_penalty, 1.1f);
  EXPECT_EQ(r.presence_penalty, 0.5f);
  EXPECT_EQ(r.frequency_penalty, -0.25f);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.counter, 7u);
}

TEST(TokenHistory, CountsDistinctTokensOfPromptAndOutput) {
  TokenHistory h;
  const std::vector<int32_t> prompt = {5, 9, 5, 2};
  h.add_prompt(prompt);
  h.add_output(9);
  h.add_output(7);
  h.add_output(9);
  const auto t = h.tokens();
  ASSERT_EQ(t.size(), 4u);
  auto find = [&](int32_t id) {
    for (const HistoryToken& x : t)
      if (x.id == id) return x;
    return HistoryToken{-1, -1, -1};
  };
  EXPECT_EQ(find(5).prompt_count, 2);
  EXPECT_EQ(find(5).output_count, 0);
  EXPECT_EQ(find(9).prompt_count, 1);
  EXPECT_EQ(find(9).output_count, 2);
  EXPECT_EQ(find(7).prompt_count, 0);
  EXPECT_EQ(find(7).output_count, 1);
  EXPECT_EQ(find(2).prompt_count, 1);
}

}  // namespace
}  // namespace tide
