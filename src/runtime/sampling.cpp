#include "runtime/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "core/error.h"

namespace tide {

namespace {

template <typename... Args>
[[noreturn]] void refuse(const char* param, fmt::format_string<Args...> format, Args&&... args) {
  throw ParameterError(param, fmt::format(format, std::forward<Args>(args)...));
}

// Whether x lies in [kMinSamplingValue, kMaxSamplingValue]: positive and finite in f32, and so is 1 / x.
bool positive_in_f32(double x) { return x >= kMinSamplingValue && x <= kMaxSamplingValue; }

}  // namespace

void SamplingParams::validate() const {
  if (!(temperature == 0 || positive_in_f32(temperature))) {
    refuse("temperature", "temperature must be 0 (greedy) or in [{:g}, {:g}], got {}", kMinSamplingValue,
           kMaxSamplingValue, temperature);
  }
  if (top_k < 0) refuse("top_k", "top_k must be >= 0 (0 turns it off), got {}", top_k);
  if (!(top_p >= kMinSamplingValue && top_p <= 1)) {
    refuse("top_p", "top_p must be in [{:g}, 1] (1 turns it off), got {}", kMinSamplingValue, top_p);
  }
  if (!(min_p >= 0 && min_p <= 1)) refuse("min_p", "min_p must be in [0, 1], got {}", min_p);
  if (!positive_in_f32(repetition_penalty)) {
    refuse("repetition_penalty", "repetition_penalty must be in [{:g}, {:g}] (1 turns it off), got {}",
           kMinSamplingValue, kMaxSamplingValue, repetition_penalty);
  }
  if (!(presence_penalty >= -2 && presence_penalty <= 2)) {
    refuse("presence_penalty", "presence_penalty must be in [-2, 2], got {}", presence_penalty);
  }
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2)) {
    refuse("frequency_penalty", "frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  }
  std::vector<int32_t> ids;
  for (const auto& [id, bias] : logit_bias) {
    if (!(bias >= -100 && bias <= 100)) refuse("logit_bias", "logit_bias of token {} must be in [-100, 100], got {}", id, bias);
    ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  if (const auto dup = std::adjacent_find(ids.begin(), ids.end()); dup != ids.end()) {
    refuse("logit_bias", "logit_bias lists token {} twice", *dup);
  }
  // The ranges above keep the f32 row inside what the op accepts; this is the op's own check of it.
  check_sampling_row(row(0, 0), {}, 1);
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

void TokenHistory::set_bias(int32_t id, float bias) { entry(id).bias = bias; }

void TokenHistory::append_with(std::span<const int32_t> banned, int32_t forced, std::vector<HistoryToken>& out) const {
  const size_t begin = out.size();
  out.insert(out.end(), tokens_.begin(), tokens_.end());
  // The entry of `id` in this row's part of `out`, added when the history has none.
  const auto entry = [&](int32_t id) -> HistoryToken& {
    if (const auto it = index_.find(id); it != index_.end()) return out[begin + it->second];
    const auto added = std::find_if(out.begin() + static_cast<std::ptrdiff_t>(begin + tokens_.size()), out.end(),
                                    [&](const HistoryToken& t) { return t.id == id; });
    if (added != out.end()) return *added;
    return out.emplace_back(HistoryToken{id, 0, 0, 0.0f});
  };
  for (int32_t id : banned) entry(id).bias = -std::numeric_limits<float>::infinity();
  if (forced >= 0) entry(forced).bias = kForcedTokenBias;
}

}  // namespace tide
