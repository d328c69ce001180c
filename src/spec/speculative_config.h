// The speculative decoding configuration, given as vLLM's --speculative-config JSON object:
//   {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
//   {"model": "DIR", "num_speculative_tokens": 4}                  (a draft model; "method": "draft_model")
// Parsed once where the flag is read; every error names the key it is about.
#pragma once

#include <string>
#include <string_view>

namespace tide::spec {

struct SpeculativeConfig {
  enum class Method { kNgram, kDraftModel };

  static constexpr int kMaxSpeculativeTokens = 16;
  static constexpr int kDefaultLookupMax = 4;  // with neither prompt_lookup key given
  static constexpr int kDefaultLookupMin = 2;

  Method method = Method::kNgram;
  int num_speculative_tokens = 0;  // drafted tokens per step and sequence, 1 .. kMaxSpeculativeTokens
  int prompt_lookup_min = 0;       // ngram: the shortest suffix matched
  int prompt_lookup_max = 0;       // ngram: the longest suffix matched
  std::string model;               // draft_model: the draft model's folder

  // Throws std::invalid_argument naming the offending key (or the JSON error).
  static SpeculativeConfig parse(std::string_view json_text);
};

const char* method_name(SpeculativeConfig::Method method);

}  // namespace tide::spec
