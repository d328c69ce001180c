#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace tide {

void SamplingParams::validate() const {
  if (!(temperature >= 0) || !std::isfinite(temperature)) fail("temperature must be >= 0, got {}", temperature);
  if (top_k < 0) fail("top_k must be >= 0 (0 turns it off), got {}", top_k);
  if (!(top_p > 0 && top_p <= 1)) fail("top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0 && min_p <= 1)) fail("min_p must be in [0, 1], got {}", min_p);
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty)) {
    fail("repetition_penalty must be > 0 (1 turns it off), got {}", repetition_penalty);
  }
  if (!(presence_penalty >= -2 && presence_penalty <= 2)) fail("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2)) {
    fail("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  }
}

SamplingRow SamplingParams::row(uint64_t seed_, uint64_t counter) const {
  SamplingRow r;
  r.temperature = static_cast<float>(temperature);
  r.top_k = static_cast<int32_t>(std::min<int64_t>(top_k, std::numeric_limits<int32_t>::max()));
  r.top_p = static_cast<float>(top_p);
  r.min_p = static_cast<float>(min_p);
  r.repetition_penalty = static_cast<float>(repetition_penalty);
  r.presence_penalty = static_cast<float>(presence_penalty);
  r.frequency_penalty = static_cast<float>(frequency_penalty);
  r.seed = seed_;
  r.counter = counter;
  return r;
}

HistoryToken& TokenHistory::entry(int32_t id) {
  auto [it, added] = index_.try_emplace(id, tokens_.size());
  if (added) tokens_.push_back(HistoryToken{id, 0, 0});
  return tokens_[it->second];
}

void TokenHistory::add_prompt(std::span<const int32_t> ids) {
  for (int32_t id : ids) ++entry(id).prompt_count;
}

void TokenHistory::add_output(int32_t id) { ++entry(id).output_count; }

}  // namespace tide
