// Checks shared by every backend's implementation of the op interface.
#include "backend/backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace tide {

DecodeFirstOrder decode_first_order(std::span<const int32_t> seq_starts) {
  DecodeFirstOrder d;
  const auto num_seqs = static_cast<int32_t>(seq_starts.size()) - 1;
  std::vector<int32_t> others;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int64_t tokens = seq_starts[static_cast<size_t>(s) + 1] - seq_starts[static_cast<size_t>(s)];
    if (tokens <= kDecodeSeqTokens) {
      d.order.push_back(s);
      d.max_decode_seq_tokens = std::max(d.max_decode_seq_tokens, tokens);
    } else {
      others.push_back(s);
    }
  }
  d.num_decode_seqs = static_cast<int64_t>(d.order.size());
  d.order.insert(d.order.end(), others.begin(), others.end());
  return d;
}

void check_draft_sampling(const DraftSampling& d, int64_t num_rows, int64_t vocab) {
  const auto j = static_cast<int64_t>(d.rows.size());
  if (d.logits.dtype != DType::kF32 || d.logits.shape.ndim != 2 || d.logits.dim(0) != j || d.logits.dim(1) != vocab) {
    fail("sample: draft logits must be [{}, {}] F32", j, vocab);
  }
  if (static_cast<int64_t>(d.ids.size()) != j) fail("sample: {} draft ids for {} draft rows", d.ids.size(), j);
  if (static_cast<int64_t>(d.index.size()) != num_rows) fail("sample: draft index must hold {} entries, got {}", num_rows, d.index.size());
  for (int64_t r = 0; r < num_rows; ++r) {
    const int32_t i = d.index[static_cast<size_t>(r)];
    if (i < -1 || i >= j) fail("sample: draft index[{}] = {} is not -1 or one of {} drafts", r, i, j);
  }
  for (int64_t i = 0; i < j; ++i) {
    const SamplingRow& q = d.rows[static_cast<size_t>(i)];
    check_sampling_row(q, {}, vocab);
    if (q.temperature == 0) fail("sample: draft row {} has temperature 0 (a point mass is checked by equality)", i);
    const int32_t id = d.ids[static_cast<size_t>(i)];
    if (id < 0 || id >= vocab) fail("sample: draft id {} is out of range (vocabulary {})", id, vocab);
  }
}

void Backend::sample_with_drafts(Tensor, Tensor, const SamplingBatch&, const DraftSampling&) {
  fail("the {} backend has no speculative sampling against a draft's distribution", name());
}

void check_sampling_row(const SamplingRow& r, std::span<const HistoryToken> history, int64_t vocab) {
  // Temperature and repetition_penalty divide: their reciprocals must be finite too.
  if (!(r.temperature >= 0) || !std::isfinite(r.temperature) ||
      (r.temperature > 0 && !std::isfinite(1.0f / r.temperature))) {
    fail("sample: temperature must be 0 or a positive float with a finite reciprocal, got {}", r.temperature);
  }
  if (r.top_k < 0) fail("sample: top_k must be >= 0, got {}", r.top_k);
  if (!(r.top_p > 0 && r.top_p <= 1)) fail("sample: top_p must be in (0, 1], got {}", r.top_p);
  if (!(r.min_p >= 0 && r.min_p <= 1)) fail("sample: min_p must be in [0, 1], got {}", r.min_p);
  if (!(r.repetition_penalty > 0) || !std::isfinite(r.repetition_penalty) ||
      !std::isfinite(1.0f / r.repetition_penalty)) {
    fail("sample: repetition_penalty must be a positive float with a finite reciprocal, got {}", r.repetition_penalty);
  }
  if (!std::isfinite(r.presence_penalty)) fail("sample: presence_penalty must be finite");
  if (!std::isfinite(r.frequency_penalty)) fail("sample: frequency_penalty must be finite");
  for (const HistoryToken& h : history) {
    if (h.id < 0 || h.id >= vocab) fail("sample: history token id {} is out of range (vocabulary {})", h.id, vocab);
    if (h.prompt_count < 0 || h.output_count < 0) fail("sample: history counts must be >= 0 (token {})", h.id);
    // -inf bans the token; +inf would make every other token impossible and break the weights.
    if (std::isnan(h.bias) || h.bias == INFINITY) {
      fail("sample: logit bias must be finite or -inf, got {} (token {})", h.bias, h.id);
    }
  }
}

void check_sampling_batch(const SamplingBatch& batch, int64_t num_rows, int64_t vocab) {
  if (static_cast<int64_t>(batch.rows.size()) != num_rows) {
    fail("sample: {} sampling rows for {} rows of logits", batch.rows.size(), num_rows);
  }
  if (vocab <= 0 || vocab > (int64_t{1} << 23)) fail("sample: vocabulary of {} tokens (1 .. 2^23 supported)", vocab);
  if (batch.history_starts.empty()) {
    if (!batch.history.empty()) fail("sample: history tokens without history_starts");
  } else if (static_cast<int64_t>(batch.history_starts.size()) != num_rows + 1 || batch.history_starts.front() != 0 ||
             batch.history_starts.back() != static_cast<int32_t>(batch.history.size())) {
    fail("sample: history_starts must hold {} offsets from 0 to {}", num_rows + 1, batch.history.size());
  }
  for (int64_t r = 0; !batch.history_starts.empty() && r < num_rows; ++r) {
    if (batch.history_starts[static_cast<size_t>(r + 1)] < batch.history_starts[static_cast<size_t>(r)]) {
      fail("sample: history_starts must not decrease (row {})", r);
    }
  }
  if (!batch.mask_index.empty() || !batch.masks.empty()) {
    if (static_cast<int64_t>(batch.mask_index.size()) != num_rows) {
      fail("sample: mask_index must hold {} entries, got {}", num_rows, batch.mask_index.size());
    }
    const int64_t words = mask_words(vocab);
    if (batch.masks.size() % static_cast<size_t>(words) != 0) {
      fail("sample: masks must hold whole masks of {} words, got {} words", words, batch.masks.size());
    }
    const int64_t num_masks = static_cast<int64_t>(batch.masks.size()) / words;
    for (int64_t r = 0; r < num_rows; ++r) {
      const int32_t m = batch.mask_index[static_cast<size_t>(r)];
      if (m < -1 || m >= num_masks) fail("sample: mask_index[{}] = {} is not -1 or one of {} masks", r, m, num_masks);
    }
  }
  for (int64_t r = 0; r < num_rows; ++r) {
    std::span<const HistoryToken> history;
    if (!batch.history_starts.empty()) {
      const int32_t begin = batch.history_starts[static_cast<size_t>(r)];
      const int32_t end = batch.history_starts[static_cast<size_t>(r + 1)];
      history = batch.history.subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin));
    }
    try {
      check_sampling_row(batch.rows[static_cast<size_t>(r)], history, vocab);
    } catch (const Error& e) {
      fail("{} (row {})", e.what(), r);
    }
  }
}

void check_logprobs_args(const Tensor& out_values, const Tensor& out_ids, const Tensor& logits,
                         const Tensor& chosen_ids, int n) {
  if (logits.dtype != DType::kF32 || logits.shape.ndim != 2) {
    fail("logprobs: logits must be [R, V] F32, got {} {}", logits.shape.str(), dtype_name(logits.dtype));
  }
  const int64_t num_rows = logits.dim(0), vocab = logits.dim(1);
  if (vocab < 1 || vocab > INT32_MAX) fail("logprobs: vocabulary of {} tokens (1 .. 2^31 - 1 supported)", vocab);
  if (n < 0 || n > kMaxLogprobs || n > vocab) {
    fail("logprobs: n must be in [0, min({}, V = {})], got {}", kMaxLogprobs, vocab, n);
  }
  if (chosen_ids.dtype != DType::kI32 || chosen_ids.shape.ndim != 1 || chosen_ids.dim(0) != num_rows) {
    fail("logprobs: chosen_ids must be [{}] I32, got {} {}", num_rows, chosen_ids.shape.str(),
         dtype_name(chosen_ids.dtype));
  }
  if (out_values.dtype != DType::kF32 || out_values.shape.ndim != 2 || out_values.dim(0) != num_rows ||
      out_values.dim(1) != 1 + n) {
    fail("logprobs: out_values must be [{}, {}] F32, got {} {}", num_rows, 1 + n, out_values.shape.str(),
         dtype_name(out_values.dtype));
  }
  if (out_ids.dtype != DType::kI32 || out_ids.shape.ndim != 2 || out_ids.dim(0) != num_rows || out_ids.dim(1) != n) {
    fail("logprobs: out_ids must be [{}, {}] I32, got {} {}", num_rows, n, out_ids.shape.str(),
         dtype_name(out_ids.dtype));
  }
}

void Backend::unsupported(const char* op) const { fail("the {} backend does not implement {} yet", name(), op); }

}  // namespace tide
