// The sample op of the CPU backend: the reference (backend.h gives the semantics). Reference, not fast: each
// filter is a plain loop over the row, thresholds come from sorting, and the arithmetic is
// sampling_math.h's, shared with the CUDA kernel so that both pick the same ids.
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace tide {
namespace {

using namespace sampling;

// Bias, then penalties, on the listed tokens (steps 0, 1).
void adjust(std::span<float> logits, const SamplingRow& p, std::span<const HistoryToken> history) {
  for (const HistoryToken& h : history) logits[h.id] = adjusted_logit(logits[h.id], h, p);
}

// Steps 2-5 over logits already biased and penalized: the kept weight of every token into `w`, the argmax into
// `best`; returns their sum. A greedy row (or one whose every logit is -inf) keeps the argmax alone, weight 1.
uint64_t kept_weights(std::span<const float> logits, const SamplingRow& p, std::vector<uint64_t>& w, int32_t& best) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  std::vector<uint32_t> keys(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) keys[i] = order_key(logits[i]);
  w.assign(static_cast<size_t>(vocab), 0);

  // 2. Greedy: the largest key, the lowest id among equals.
  best = static_cast<int32_t>(std::max_element(keys.begin(), keys.end()) - keys.begin());
  const float max_logit = logits[best];
  // A row of -inf only has no distribution to draw from (and -inf - -inf would be NaN): the argmax, id 0.
  if (p.temperature == 0 || max_logit == -INFINITY) {
    w[static_cast<size_t>(best)] = 1;
    return 1;
  }
  const float inv_temperature = 1.0f / p.temperature;
  auto weight = [&](int64_t i) { return weight_of(relative_prob(logits[i], max_logit, inv_temperature)); };

  // 3. Top-k: the k-th largest key is the threshold.
  uint32_t threshold = 0;
  if (p.top_k > 0 && p.top_k < vocab) {
    std::vector<uint32_t> sorted = keys;
    std::nth_element(sorted.begin(), sorted.begin() + (p.top_k - 1), sorted.end(), std::greater<>());
    threshold = sorted[static_cast<size_t>(p.top_k - 1)];
  }

  // 4. Top-p over the tokens top-k kept, by descending key: the key at which the mass reaches `need`.
  if (p.top_p < 1) {
    std::vector<int64_t> kept;
    uint64_t total = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      if (keys[i] >= threshold) {
        kept.push_back(i);
        total += weight(i);
      }
    }
    std::sort(kept.begin(), kept.end(), [&](int64_t a, int64_t b) { return keys[a] > keys[b]; });
    const uint64_t need = top_p_need(p.top_p, total);
    uint64_t mass = 0;
    for (int64_t i : kept) {
      mass += weight(i);
      if (mass >= need) {
        threshold = keys[i];
        break;
      }
    }
  }

  // 5. Min-p.
  uint64_t total = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (keys[i] < threshold) continue;
    const float prob = relative_prob(logits[i], max_logit, inv_temperature);
    if (p.min_p > 0 && !(prob >= p.min_p)) continue;
    w[static_cast<size_t>(i)] = weight_of(prob);
    total += w[static_cast<size_t>(i)];
  }
  return total;
}

// logits: [V] (biased and penalized in place), history: the row's distinct listed tokens. Returns the chosen id.
int32_t sample_row(std::span<float> logits, const SamplingRow& p, std::span<const HistoryToken> history) {
  adjust(logits, p, history);
  std::vector<uint64_t> w;
  int32_t best = 0;
  const uint64_t total = kept_weights(logits, p, w, best);
  if (p.temperature == 0) return best;
  // 6. The inverse-CDF draw over the kept weights in vocabulary order.
  const uint64_t x = scale_to(random_bits(p.seed, p.counter), total);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    cumulative += w[i];
    if (cumulative > x) return static_cast<int32_t>(i);
  }
  return best;  // unreachable: the most likely token always has weight 2^40
}

// sample_row for a row that checks drafted token `d`, drawn from the draft's `q_logits` under `q`
// (Backend::sample_with_drafts).
int32_t sample_row_with_draft(std::span<float> logits, const SamplingRow& p, std::span<const HistoryToken> history,
                              std::span<const float> q_logits, const SamplingRow& q, int32_t d) {
  adjust(logits, p, history);
  std::vector<uint64_t> wp, wq;
  int32_t best = 0, q_best = 0;
  const uint64_t p_total = kept_weights(logits, p, wp, best);
  const uint64_t q_total = kept_weights(q_logits, q, wq, q_best);
  const auto du = static_cast<size_t>(d);
  if (accept_draft(wp[du], p_total, wq[du], q_total, random_bits(q.seed, q.counter))) return d;
  unsigned __int128 residual = 0;
  for (size_t i = 0; i < wp.size(); ++i) residual += residual_weight(wp[i], p_total, wq[i], q_total);
  if (residual == 0) return d;
  const unsigned __int128 x = scale_to_128(random_bits(p.seed, p.counter), residual);
  unsigned __int128 cumulative = 0;
  for (size_t i = 0; i < wp.size(); ++i) {
    cumulative += residual_weight(wp[i], p_total, wq[i], q_total);
    if (cumulative > x) return static_cast<int32_t>(i);
  }
  return d;  // unreachable: x < residual
}

// The row's mask applied to its logits (step -1): tokens it does not allow are impossible, whatever the bias.
void apply_mask(std::span<float> row, const SamplingBatch& batch, int64_t r) {
  const int32_t m = batch.mask_index.empty() ? -1 : batch.mask_index[static_cast<size_t>(r)];
  if (m < 0) return;
  const auto vocab = static_cast<int64_t>(row.size());
  const uint32_t* mask = batch.masks.data() + static_cast<size_t>(m) * static_cast<size_t>(mask_words(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    if (((mask[i / 32] >> (i % 32)) & 1u) == 0) row[static_cast<size_t>(i)] = -INFINITY;
  }
}

std::span<const HistoryToken> history_of(const SamplingBatch& batch, int64_t r) {
  if (batch.history_starts.empty()) return {};
  const int32_t begin = batch.history_starts[static_cast<size_t>(r)];
  return batch.history.subspan(static_cast<size_t>(begin),
                               static_cast<size_t>(batch.history_starts[static_cast<size_t>(r + 1)] - begin));
}

}  // namespace

// out_ids: [R] i32, logits: [R, V] f32
void CpuBackend::sample(Tensor out_ids, Tensor logits, const SamplingBatch& batch) {
  if (logits.dtype != DType::kF32) fail("cpu backend: sample logits must be F32, got {}", dtype_name(logits.dtype));
  if (out_ids.dtype != DType::kI32) fail("cpu backend: sample ids must be I32, got {}", dtype_name(out_ids.dtype));
  const int64_t num_rows = logits.dim(0), vocab = logits.dim(1);
  TIDE_CHECK(out_ids.numel() == num_rows);
  check_sampling_batch(batch, num_rows, vocab);
  for (int64_t r = 0; r < num_rows; ++r) {
    const std::span<float> row(logits.as<float>() + r * vocab, static_cast<size_t>(vocab));
    apply_mask(row, batch, r);
    out_ids.as<int32_t>()[r] = sample_row(row, batch.rows[static_cast<size_t>(r)], history_of(batch, r));
  }
}

void CpuBackend::sample_with_drafts(Tensor out_ids, Tensor logits, const SamplingBatch& batch,
                                    const DraftSampling& drafts) {
  if (logits.dtype != DType::kF32) fail("cpu backend: sample logits must be F32, got {}", dtype_name(logits.dtype));
  if (out_ids.dtype != DType::kI32) fail("cpu backend: sample ids must be I32, got {}", dtype_name(out_ids.dtype));
  const int64_t num_rows = logits.dim(0), vocab = logits.dim(1);
  TIDE_CHECK(out_ids.numel() == num_rows);
  check_sampling_batch(batch, num_rows, vocab);
  check_draft_sampling(drafts, num_rows, vocab);
  for (int64_t r = 0; r < num_rows; ++r) {
    const std::span<float> row(logits.as<float>() + r * vocab, static_cast<size_t>(vocab));
    apply_mask(row, batch, r);
    const SamplingRow& p = batch.rows[static_cast<size_t>(r)];
    const int32_t j = drafts.index[static_cast<size_t>(r)];
    if (j < 0) {
      out_ids.as<int32_t>()[r] = sample_row(row, p, history_of(batch, r));
      continue;
    }
    const std::span<const float> q(drafts.logits.as<float>() + j * vocab, static_cast<size_t>(vocab));
    out_ids.as<int32_t>()[r] = sample_row_with_draft(row, p, history_of(batch, r), q, drafts.rows[static_cast<size_t>(j)],
                                                     drafts.ids[static_cast<size_t>(j)]);
  }
}

}  // namespace tide
