// Dispatch of the tensor-core attention kernels (prefill_attention.cuh, decode_attention.cuh) by head_dim,
// and the split count of the decode kernel. The kernels are instantiated in attention_d<D>.cu.
#include <algorithm>

#include "backend/cuda/mma_attention.cuh"

namespace tide::cuda {
namespace {

constexpr int kDecodeTileKeys = 64;  // DecodeConfig<D>::kKeys for every D

}  // namespace

bool mma_attention_supports(int64_t head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

bool mma_decode_supports(int64_t head_dim, int64_t group) { return mma_attention_supports(head_dim) && group <= 16; }

int mma_decode_max_rows(int64_t head_dim) { return head_dim <= 128 ? 24 : 16; }

int mma_decode_tokens_per_cta(int64_t head_dim, int64_t group, int64_t max_seq_tokens) {
  const int64_t most = mma_decode_max_rows(head_dim);
  return static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(most / group, max_seq_tokens), 1, most));
}

int64_t mma_decode_ctas(int64_t head_dim, int64_t num_tokens, int64_t num_seqs, int64_t group, int64_t max_seq_tokens,
                        bool listed) {
  const int64_t per_cta = mma_decode_tokens_per_cta(head_dim, group, max_seq_tokens);
  return per_cta == 1 && !listed ? num_tokens : num_seqs * ((max_seq_tokens + per_cta - 1) / per_cta);
}

int64_t mma_decode_slot_tokens(int64_t head_dim, int64_t num_tokens, int64_t num_seqs, int64_t group,
                               int64_t max_seq_tokens, bool listed) {
  if (!listed) return num_tokens;
  const int64_t per_cta = mma_decode_tokens_per_cta(head_dim, group, max_seq_tokens);
  return num_seqs * ((max_seq_tokens + per_cta - 1) / per_cta) * per_cta;
}

int64_t mma_decode_max_keys(int64_t window, int64_t max_position, int64_t max_seq_tokens) {
  if (window == 0) return max_position + 1;
  return std::min(window + kDecodeTileKeys - 1 + std::max<int64_t>(max_seq_tokens, 1) - 1, max_position + 1);
}

namespace {

// One wave: as many splits as keep every (token, kv head)'s splits resident at once, `resident_per_sm` CTAs per
// SM, splits of at least one tile. A split streams its tiles through a pipeline of its own, so one wave already
// keeps the memory busy; more CTAs only add partial outputs to merge and per-CTA setup, and a wave and a bit
// waits on the bit (faster than many CTAs per SM at every measured batch and context: docs/perf-log/2026-12.md,
// commit 91af0ed).
int decode_splits(int64_t num_ctas, int64_t num_heads_kv, int64_t max_keys, int num_sms, int resident_per_sm) {
  const int64_t ctas = std::max<int64_t>(1, num_ctas * num_heads_kv);
  const int64_t by_occupancy = int64_t{resident_per_sm} * num_sms / ctas;
  const int64_t by_keys = (max_keys + kDecodeTileKeys - 1) / kDecodeTileKeys;
  return static_cast<int>(std::clamp<int64_t>(std::min(by_occupancy, by_keys), 1, 128));
}

}  // namespace

DecodePlan mma_decode_plan(int64_t ctas, int64_t num_heads_kv, int64_t max_keys, int num_sms, int64_t head_dim,
                           int64_t group, int64_t max_seq_tokens, int force_ctas_per_sm) {
  // Three CTAs per SM (the kernel's registers allow it for one tile of 8 query rows at head_dim <= 128, two
  // stages each) while the splits stay short; for splits longer than kLongSplitKeys two CTAs per SM with deeper
  // stages: a long split's CTA streams alone for most of the kernel, and its own loads in flight are what keep
  // the memory busy (R7B FP8, 32 x 32K: 19.1 against 20.8 ms per step; 8 x 32K, whose three-per-SM splits are
  // 5.5K keys: 5.8 against 6.4 ms; docs/perf-log/2026-12.md).
  constexpr int64_t kLongSplitKeys = 8192;
  if (head_dim <= 128 && mma_decode_tokens_per_cta(head_dim, group, max_seq_tokens) * group <= 8 &&
      force_ctas_per_sm != 2) {
    const int splits = decode_splits(ctas, num_heads_kv, max_keys, num_sms, 3);
    if (force_ctas_per_sm == 3 || (max_keys + splits - 1) / splits <= kLongSplitKeys) return DecodePlan{splits, 3};
  }
  return DecodePlan{decode_splits(ctas, num_heads_kv, max_keys, num_sms, 2), 2};
}

void launch_mma_prefill(const PagedAttentionParams& p, int64_t max_seq_tokens, PrefillAttentionKernel kernel,
                        cudaStream_t stream) {
  if (p.head_dim == 128 && kernel != PrefillAttentionKernel::kMmaSync) {
    return mma::launch_wgmma_prefill(p, max_seq_tokens, stream);
  }
  switch (p.head_dim) {
    case 64: return mma::launch_prefill<64>(p, max_seq_tokens, stream);
    case 128: return mma::launch_prefill<128>(p, max_seq_tokens, stream);
    case 256: return mma::launch_prefill<256>(p, max_seq_tokens, stream);
    default: return;  // callers check mma_attention_supports first
  }
}

void launch_mma_decode(const PagedAttentionParams& p, int64_t max_keys, int64_t max_seq_tokens, float* part_out,
                       float* part_ml, const DecodePlan& plan, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: return mma::launch_decode<64>(p, max_keys, max_seq_tokens, part_out, part_ml, plan, stream);
    case 128: return mma::launch_decode<128>(p, max_keys, max_seq_tokens, part_out, part_ml, plan, stream);
    case 256: return mma::launch_decode<256>(p, max_keys, max_seq_tokens, part_out, part_ml, plan, stream);
    default: return;
  }
}

}  // namespace tide::cuda
