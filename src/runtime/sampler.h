// Sampler: picks the next token from one row of logits. Greedy when temperature is 0; otherwise
// temperature, then top-k, then top-p (nucleus) filtering, then a draw from a seeded generator, in the
// order transformers applies them. Non-goals (engine runtime issue): penalties, min-p, logit bias, logprobs.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>

namespace tide {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  std::optional<uint64_t> seed;  // unset: seeded from std::random_device

  // Throws tide::Error naming the parameter when a value is out of range.
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // logits: [vocab]. Returns the chosen token id.
  int32_t sample(std::span<const float> logits);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

// Index of the largest value; the lowest index among equal maxima.
int32_t argmax(std::span<const float> values);

}  // namespace tide
