// --speculative-config parsing (spec/speculative_config.h): vLLM's forms, the defaults, and a refusal naming the
// key for each kind of bad input.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "spec/speculative_config.h"

namespace tide::spec {
namespace {

using Method = SpeculativeConfig::Method;

std::string error_of(const std::string& text) {
  try {
    SpeculativeConfig::parse(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(SpeculativeConfig, ParsesVllmsForms) {
  const auto ngram = SpeculativeConfig::parse(
      R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5, "prompt_lookup_min": 3})");
  EXPECT_EQ(ngram.method, Method::kNgram);
  EXPECT_EQ(ngram.num_speculative_tokens, 4);
  EXPECT_EQ(ngram.prompt_lookup_min, 3);
  EXPECT_EQ(ngram.prompt_lookup_max, 5);

  const auto draft = SpeculativeConfig::parse(R"({"model": "/models/r7b", "num_speculative_tokens": 3})");
  EXPECT_EQ(draft.method, Method::kDraftModel);
  EXPECT_EQ(draft.model, "/models/r7b");
  EXPECT_STREQ(method_name(draft.method), "draft_model");
  EXPECT_EQ(SpeculativeConfig::parse(R"({"method": "draft_model", "model": "d", "num_speculative_tokens": 1})").model,
            "d");
}

TEST(SpeculativeConfig, DisableByBatchSizeForEitherMethod) {
  EXPECT_EQ(SpeculativeConfig::parse(R"({"method": "ngram", "num_speculative_tokens": 2})").disable_by_batch_size, 0);
  EXPECT_EQ(SpeculativeConfig::parse(
                R"({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 32})")
                .disable_by_batch_size,
            32);
  EXPECT_EQ(
      SpeculativeConfig::parse(R"({"model": "d", "num_speculative_tokens": 4, "disable_by_batch_size": 2})")
          .disable_by_batch_size,
      2);
}

TEST(SpeculativeConfig, LookupBoundsDefaultTogether) {
  const auto none = SpeculativeConfig::parse(R"({"method": "ngram", "num_speculative_tokens": 2})");
  EXPECT_EQ(none.prompt_lookup_min, SpeculativeConfig::kDefaultLookupMin);
  EXPECT_EQ(none.prompt_lookup_max, SpeculativeConfig::kDefaultLookupMax);
  const auto max_only =
      SpeculativeConfig::parse(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 6})");
  EXPECT_EQ(max_only.prompt_lookup_min, 6);
  EXPECT_EQ(max_only.prompt_lookup_max, 6);
  const auto min_only =
      SpeculativeConfig::parse(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 3})");
  EXPECT_EQ(min_only.prompt_lookup_min, 3);
  EXPECT_EQ(min_only.prompt_lookup_max, 3);
}

TEST(SpeculativeConfig, RefusesBadInputNamingTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"method": "ngram", "num_speculative_tokens": 4)", "not valid JSON"},
      {R"([1, 2])", "expected a JSON object"},
      {R"({"num_speculative_tokens": 4})", "method is required"},
      {R"({"method": "eagle", "num_speculative_tokens": 4})", "method 'eagle'"},
      {R"({"method": 3, "num_speculative_tokens": 4})", "method must be a string"},
      {R"({"method": "ngram"})", "num_speculative_tokens is required"},
      {R"({"method": "ngram", "num_speculative_tokens": 0})", "num_speculative_tokens must be in [1, 16]"},
      {R"({"method": "ngram", "num_speculative_tokens": 17})", "num_speculative_tokens must be in"},
      {R"({"method": "ngram", "num_speculative_tokens": 2.5})", "num_speculative_tokens must be an integer"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 5, "prompt_lookup_max": 3})",
       "prompt_lookup_min (5) is greater than prompt_lookup_max (3)"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 0})", "prompt_lookup_max must be in"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "model": "x"})", "model is for method draft_model"},
      {R"({"method": "draft_model", "num_speculative_tokens": 2})", "model is required"},
      {R"({"model": "", "num_speculative_tokens": 2})", "model must be a non-empty path"},
      {R"({"model": "d", "num_speculative_tokens": 2, "prompt_lookup_max": 3})", "are for method ngram"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 1})",
       "disable_by_batch_size must be in [2, "},
      {R"({"model": "d", "num_speculative_tokens": 2, "disable_by_batch_size": "8"})",
       "disable_by_batch_size must be an integer"},
      {R"({"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1})",
       "unknown key 'draft_tensor_parallel_size'"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string error = error_of(text);
    EXPECT_NE(error.find(expected), std::string::npos) << text << " -> '" << error << "'";
    EXPECT_EQ(error.rfind("speculative config: ", 0), 0u) << error;
  }
}

}  // namespace
}  // namespace tide::spec
