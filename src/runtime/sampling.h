// What a request asks of sampling (SamplingParams), the per-sequence token history the penalties read
// (TokenHistory), and the row of the backend's sample op they become. The sampling itself is the backend
// op (backend.h, "sampling"): the CPU backend's is the reference, the GPU's runs on the device logits.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"

namespace tide {

// The bounds SamplingParams::validate puts on a positive float parameter (temperature when not 0,
// repetition_penalty, top_p): the sample op computes in f32, where the value must stay a positive finite
// number with a finite reciprocal (1 / temperature; a logit divided by repetition_penalty), so values that
// would round to 0 or to infinity in f32 are refused rather than left to fail a step.
inline constexpr double kMinSamplingValue = 1e-30;
inline constexpr double kMaxSamplingValue = 1e30;

// A request's parameter out of range: the message says the range, param() names the parameter.
class ParameterError : public Error {
 public:
  ParameterError(std::string param, const std::string& message) : Error(message), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

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
  // Added to the logits of these token ids before the penalties (OpenAI logit_bias), each in [-100, 100];
  // ids distinct (checked against the vocabulary by the engine).
  std::vector<std::pair<int32_t, float>> logit_bias;

  // Throws ParameterError naming the parameter when a value is out of range, checked both as given and as the
  // f32 the sample op computes with: whatever passes never makes the op refuse the row.
  void validate() const;
  bool has_penalties() const { return repetition_penalty != 1.0 || presence_penalty != 0.0 || frequency_penalty != 0.0; }
  // Whether the sample op needs a token list for this request's rows (penalties or a logit bias).
  bool needs_token_list() const { return has_penalties() || !logit_bias.empty(); }
  // The op's row for draw `counter` of a sequence whose stream is `seed`.
  SamplingRow row(uint64_t seed, uint64_t counter) const;
};

// The bias that makes a token the one sampled, whatever the row's parameters: logits are orders of magnitude
// smaller, so every other token's probability rounds to zero (and greedy picks it). Its logprob stays the
// model's, since logprobs are taken before the bias.
inline constexpr float kForcedTokenBias = 1e9f;

// The sample op's token list of one sequence: its distinct tokens, prompt and output, with their counts (for
// the penalties), and the tokens it biases (logit_bias).
class TokenHistory {
 public:
  void add_prompt(std::span<const int32_t> ids);
  void add_output(int32_t id);
  void set_bias(int32_t id, float bias);
  std::span<const HistoryToken> tokens() const { return tokens_; }
  // tokens() into `out`, with `banned` added at bias -inf (the stop ids while min_tokens are not reached yet)
  // and `forced` (when >= 0) at kForcedTokenBias.
  void append_with(std::span<const int32_t> banned, int32_t forced, std::vector<HistoryToken>& out) const;

 private:
  HistoryToken& entry(int32_t id);

  std::vector<HistoryToken> tokens_;
  std::unordered_map<int32_t, size_t> index_;
};

}  // namespace tide
