// The speculative decoding configuration, given as vLLM's --speculative-config JSON object:
//   {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
//   {"model": "DIR", "num_speculative_tokens": 4}                  (a draft model; "method": "draft_model")
// Either may add "disable_by_batch_size": N (a step speculates only while fewer than N requests run).
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
  static constexpr int kMaxDisableByBatchSize = 1 << 20;

  Method method = Method::kNgram;
  int num_speculative_tokens = 0;  // drafted tokens per step and sequence, 1 .. kMaxSpeculativeTokens
  int prompt_lookup_min = 0;       // ngram: the shortest suffix matched
  int prompt_lookup_max = 0;       // ngram: the longest suffix matched
  std::string model;               // draft_model: the draft model's folder
  // A step speculates only while fewer than this many requests run (0: at any batch size). At large batches
  // a verify step's extra tokens stop being nearly free (the matmuls turn compute-bound), so speculation
  // costs throughput there. vLLM's key and rule; at least 2.
  int disable_by_batch_size = 0;

  // Throws std::invalid_argument naming the offending key (or the JSON error).
  static SpeculativeConfig parse(std::string_view json_text);
};

const char* method_name(SpeculativeConfig::Method method);

}  // namespace tide::spec
