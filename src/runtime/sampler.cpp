#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace tide {

void SamplingParams::validate() const {
  if (!(temperature >= 0) || !std::isfinite(temperature)) fail("temperature must be >= 0, got {}", temperature);
  if (top_k < 0) fail("top_k must be >= 0 (0 turns it off), got {}", top_k);
  if (!(top_p > 0 && top_p <= 1)) fail("top_p must be in (0, 1], got {}", top_p);
}

int32_t argmax(std::span<const float> values) {
  TIDE_CHECK(!values.empty());
  return static_cast<int32_t>(std::max_element(values.begin(), values.end()) - values.begin());
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed ? *params.seed : std::random_device{}()) {
  params_.validate();
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (params_.temperature == 0) return argmax(logits);

  // Candidates sorted by logit, descending (ties: lower id first, so results do not depend on sort order).
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  size_t keep = ids.size();
  if (params_.top_k > 0) keep = std::min(keep, static_cast<size_t>(params_.top_k));
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end(), by_logit);
  ids.resize(keep);

  // Softmax of logits / temperature over the kept candidates, in double.
  std::vector<double> probs(keep);
  const double max_logit = logits[ids[0]];
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    probs[i] = std::exp((logits[ids[i]] - max_logit) / params_.temperature);
    total += probs[i];
  }
  for (double& p : probs) p /= total;

  // Top-p: the smallest prefix whose mass reaches top_p (always at least one token).
  if (params_.top_p < 1) {
    double mass = 0;
    size_t n = 0;
    while (n < keep && mass < params_.top_p) mass += probs[n++];
    probs.resize(n);
  }
  // Inverse-CDF draw with a uniform built from the raw 64-bit output: unlike std:: distributions, the
  // result for a given seed is the same with every standard library.
  double mass = 0;
  for (double p : probs) mass += p;
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53 * mass;
  double cumulative = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    cumulative += probs[i];
    if (u < cumulative) return ids[i];
  }
  return ids[probs.size() - 1];
}

}  // namespace tide
