// What a request asks of sampling (SamplingParams), the per-sequence token history the penalties read
// (TokenHistory), and the row of the backend's sample op they become. The sampling itself is the backend
// op (backend.h, "sampling"): the CPU backend's is the reference, the GPU's runs on the device logits.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"

namespace tide {

// Applied in the order penalties -> temperature -> top-k -> top-p -> min-p (backend.h gives the exact
// semantics of each).
struct SamplingParams {
  double temperature = 0.0;         // 0: greedy (argmax after penalties, lowest id on ties)
  int64_t top_k = 0;                // 0: off
  double top_p = 1.0;               // 1: off
  double min_p = 0.0;               // 0: off; keep tokens at least min_p times as likely as the most likely
  double repetition_penalty = 1.0;  // 1: off; > 1 discourages tokens of the prompt and output (transformers)
  double presence_penalty = 0.0;    // 0: off; subtracted from tokens present in the output (OpenAI)
  double frequency_penalty = 0.0;   // 0: off; times a token's count in the output, subtracted (OpenAI)
  std::optional<uint64_t> seed;     // unset: a seed from std::random_device

  // Throws tide::Error naming the parameter when a value is out of range.
  void validate() const;
  bool has_penalties() const { return repetition_penalty != 1.0 || presence_penalty != 0.0 || frequency_penalty != 0.0; }
  // The op's row for draw `counter` of a sequence whose stream is `seed`.
  SamplingRow row(uint64_t seed, uint64_t counter) const;
};

// The distinct tokens of one sequence, prompt and output, with their counts.
class TokenHistory {
 public:
  void add_prompt(std::span<const int32_t> ids);
  void add_output(int32_t id);
  std::span<const HistoryToken> tokens() const { return tokens_; }

 private:
  HistoryToken& entry(int32_t id);

  std::vector<HistoryToken> tokens_;
  std::unordered_map<int32_t, size_t> index_;
};

}  // namespace tide
