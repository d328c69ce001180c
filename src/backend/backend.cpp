// Checks shared by every backend's implementation of the op interface.
#include "backend/backend.h"

#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace tide {

void check_sampling_batch(const SamplingBatch& batch, int64_t num_rows, int64_t vocab) {
  if (static_cast<int64_t>(batch.rows.size()) != num_rows) {
    fail("sample: {} sampling rows for {} rows of logits", batch.rows.size(), num_rows);
  }
  if (vocab <= 0 || vocab > (int64_t{1} << 23)) fail("sample: vocabulary of {} tokens (1 .. 2^23 supported)", vocab);
  for (const SamplingRow& r : batch.rows) {
    if (!(r.temperature >= 0) || !std::isfinite(r.temperature)) fail("sample: temperature must be >= 0, got {}", r.temperature);
    if (r.top_k < 0) fail("sample: top_k must be >= 0, got {}", r.top_k);
    if (!(r.top_p > 0 && r.top_p <= 1)) fail("sample: top_p must be in (0, 1], got {}", r.top_p);
    if (!(r.min_p >= 0 && r.min_p <= 1)) fail("sample: min_p must be in [0, 1], got {}", r.min_p);
    if (!(r.repetition_penalty > 0) || !std::isfinite(r.repetition_penalty)) {
      fail("sample: repetition_penalty must be > 0, got {}", r.repetition_penalty);
    }
    if (!std::isfinite(r.presence_penalty)) fail("sample: presence_penalty must be finite");
    if (!std::isfinite(r.frequency_penalty)) fail("sample: frequency_penalty must be finite");
  }
  if (batch.history_starts.empty()) {
    if (!batch.history.empty()) fail("sample: history tokens without history_starts");
    return;
  }
  if (static_cast<int64_t>(batch.history_starts.size()) != num_rows + 1 || batch.history_starts.front() != 0 ||
      batch.history_starts.back() != static_cast<int32_t>(batch.history.size())) {
    fail("sample: history_starts must hold {} offsets from 0 to {}", num_rows + 1, batch.history.size());
  }
  for (int64_t r = 0; r < num_rows; ++r) {
    const int32_t begin = batch.history_starts[static_cast<size_t>(r)], end = batch.history_starts[static_cast<size_t>(r + 1)];
    if (end < begin) fail("sample: history_starts must not decrease (row {})", r);
  }
  for (int64_t r = 0; r < num_rows; ++r) {
    for (int32_t k = batch.history_starts[static_cast<size_t>(r)]; k < batch.history_starts[static_cast<size_t>(r + 1)]; ++k) {
      const HistoryToken& h = batch.history[static_cast<size_t>(k)];
      if (h.id < 0 || h.id >= vocab) {
        fail("sample: history token id {} of row {} is out of range (vocabulary {})", h.id, r, vocab);
      }
      if (h.prompt_count < 0 || h.output_count < 0) fail("sample: history counts must be >= 0 (row {}, token {})", r, h.id);
      // -inf bans the token; +inf would make every other token impossible and break the weights.
      if (std::isnan(h.bias) || h.bias == INFINITY) {
        fail("sample: logit bias must be finite or -inf, got {} (row {}, token {})", h.bias, r, h.id);
      }
    }
  }
}

}  // namespace tide
