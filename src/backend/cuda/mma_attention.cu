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

int mma_decode_tokens_per_cta(int64_t group, int64_t max_seq_tokens) {
  return static_cast<int>(std::clamp<int64_t>(std::min<int64_t>(16 / group, max_seq_tokens), 1, 16));
}

int64_t mma_decode_ctas(int64_t num_tokens, int64_t num_seqs, int64_t group, int64_t max_seq_tokens) {
  const int64_t per_cta = mma_decode_tokens_per_cta(group, max_seq_tokens);
  return per_cta == 1 ? num_tokens : num_seqs * ((max_seq_tokens + per_cta - 1) / per_cta);
}

int mma_decode_splits(int64_t num_ctas, int64_t num_heads_kv, int64_t max_keys, int num_sms) {
  // One wave: as many splits as keep every (token, kv head)'s splits resident at once (two CTAs per SM, the
  // decode kernel's launch bounds), splits of at least one tile. A split streams its tiles through a pipeline
  // of its own, so one wave already keeps the memory busy; more CTAs only add partial outputs to merge and
  // per-CTA setup, and a wave and a bit waits on the bit (faster than many CTAs per SM at every measured batch
  // and context: docs/perf-log/2026-12.md, commit 91af0ed).
  constexpr int64_t kResidentPerSm = 2;
  const int64_t ctas = std::max<int64_t>(1, num_ctas * num_heads_kv);
  const int64_t by_occupancy = kResidentPerSm * num_sms / ctas;
  const int64_t by_keys = (max_keys + kDecodeTileKeys - 1) / kDecodeTileKeys;
  return static_cast<int>(std::clamp<int64_t>(std::min(by_occupancy, by_keys), 1, 128));
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
                       float* part_ml, int num_splits, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: return mma::launch_decode<64>(p, max_keys, max_seq_tokens, part_out, part_ml, num_splits, stream);
    case 128: return mma::launch_decode<128>(p, max_keys, max_seq_tokens, part_out, part_ml, num_splits, stream);
    case 256: return mma::launch_decode<256>(p, max_keys, max_seq_tokens, part_out, part_ml, num_splits, stream);
    default: return;
  }
}

}  // namespace tide::cuda
