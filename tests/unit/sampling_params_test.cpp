// SamplingParams (validation naming the parameter, the op row it becomes) and TokenHistory (distinct
// tokens with prompt and output counts). The sampling itself is the backend op: tests/ops/cpu_sampling_test.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <span>
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

// The parameter a refusal names (ParameterError::param), "" when the parameters pass.
std::string param_of(const SamplingParams& p) {
  try {
    p.validate();
  } catch (const ParameterError& e) {
    return e.param();
  }
  return "";
}

// Values that pass in double but become 0 or infinite in the f32 the sample op computes with are refused,
// naming the parameter and its range; whatever passes gives a row the op accepts.
TEST(SamplingParams, ChecksValuesInTheFloatDomainOfTheSampleOp) {
  SamplingParams p;
  for (double bad : {1e308, 3.5e38, 1e31, 1e-46, 1e-31, 0.0, -1.0}) {
    p = {};
    p.repetition_penalty = bad;
    EXPECT_EQ(param_of(p), "repetition_penalty") << bad;
    EXPECT_NE(error_of(p).find("[1e-30, 1e+30]"), std::string::npos) << error_of(p);
  }
  for (double bad : {1e-50, 1e-31, 0.0}) {
    p = {};
    p.top_p = bad;
    EXPECT_EQ(param_of(p), "top_p") << bad;
    EXPECT_NE(error_of(p).find("[1e-30, 1]"), std::string::npos) << error_of(p);
  }
  for (double bad : {1e-50, 1e-39, 1e308, 1e31}) {
    p = {};
    p.temperature = bad;
    EXPECT_EQ(param_of(p), "temperature") << bad;
    EXPECT_NE(error_of(p).find("0 (greedy) or in [1e-30, 1e+30]"), std::string::npos) << error_of(p);
  }
  p = {};
  p.logit_bias = {{3, std::numeric_limits<float>::quiet_NaN()}};
  EXPECT_EQ(param_of(p), "logit_bias");
  p.logit_bias = {{3, std::numeric_limits<float>::infinity()}};
  EXPECT_EQ(param_of(p), "logit_bias");
  p = {};
  p.min_p = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(param_of(p), "min_p");
  p = {};
  p.presence_penalty = std::numeric_limits<double>::infinity();
  EXPECT_EQ(param_of(p), "presence_penalty");

  // The edges of every range pass, and their rows pass the op's own check.
  for (double t : {0.0, 1e-30, 1e30, 2.0}) {
    for (double r : {1e-30, 1e30, 1.0}) {
      for (double top_p : {1e-30, 1.0}) {
        p = {};
        p.temperature = t;
        p.repetition_penalty = r;
        p.top_p = top_p;
        p.min_p = 1e-50;  // 0 in f32: off, which the op accepts
        p.logit_bias = {{0, -100.0f}, {1, 100.0f}};
        EXPECT_EQ(error_of(p), "") << t << " " << r << " " << top_p;
        const SamplingRow row = p.row(1, 2);
        const HistoryToken tokens[] = {{0, 1, 1, -100.0f}, {1, 0, 2, 100.0f}};
        EXPECT_NO_THROW(check_sampling_row(row, tokens, 2));
        EXPECT_GT(row.repetition_penalty, 0.0f);
        EXPECT_TRUE(std::isfinite(1.0f / row.repetition_penalty));
        EXPECT_TRUE(row.temperature == 0.0f || std::isfinite(1.0f / row.temperature));
      }
    }
  }
}

TEST(SamplingParams, TheSampleOpsRowCheckNamesWhatItRefuses) {
  SamplingRow row;
  auto error = [&](std::span<const HistoryToken> tokens = {}) {
    try {
      check_sampling_row(row, tokens, 10);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error(), "");
  row.repetition_penalty = 1e-45f;  // positive, but its reciprocal overflows
  EXPECT_NE(error().find("repetition_penalty"), std::string::npos);
  row = {};
  row.temperature = 1e-45f;
  EXPECT_NE(error().find("temperature"), std::string::npos);
  row = {};
  row.top_p = 0.0f;
  EXPECT_NE(error().find("top_p"), std::string::npos);
  row = {};
  const HistoryToken outside[] = {{10, 1, 0, 0.0f}};
  EXPECT_NE(error(outside).find("token id 10"), std::string::npos);
  const HistoryToken banned[] = {{3, 0, 0, -std::numeric_limits<float>::infinity()}};
  EXPECT_EQ(error(banned), "");
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
