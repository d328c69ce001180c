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

int mma_decode_splits(int64_t num_tokens, int64_t num_heads_kv, int64_t max_keys, int num_sms) {
  // About 16 CTAs per SM over the launch (two resident per SM at head_dim 128, so ~8 waves: the last, partial
  // wave costs little), splits of at least one tile. Small batches get short splits: at batch 1 and 1K keys,
  // splits of 4 tiles left 32 CTAs on 132 SMs, each reading its tiles one after another (16 us per layer on
  // the H200, measured by tide_bench --ablate); one tile per split there is one tile's latency plus the merge.
  const int64_t ctas = std::max<int64_t>(1, num_tokens * num_heads_kv);
  const int64_t by_occupancy = (16 * int64_t{num_sms} + ctas - 1) / ctas;
  const int64_t by_keys = (max_keys + kDecodeTileKeys - 1) / kDecodeTileKeys;
  return static_cast<int>(std::clamp<int64_t>(std::min(by_occupancy, by_keys), 1, 128));
}

void launch_mma_prefill(const PagedAttentionParams& p, int64_t max_seq_tokens, cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: return mma::launch_prefill<64>(p, max_seq_tokens, stream);
    case 128: return mma::launch_prefill<128>(p, max_seq_tokens, stream);
    case 256: return mma::launch_prefill<256>(p, max_seq_tokens, stream);
    default: return;  // callers check mma_attention_supports first
  }
}

void launch_mma_decode(const PagedAttentionParams& p, int64_t max_keys, float* part_out, float* part_ml, int num_splits,
                       cudaStream_t stream) {
  switch (p.head_dim) {
    case 64: return mma::launch_decode<64>(p, max_keys, part_out, part_ml, num_splits, stream);
    case 128: return mma::launch_decode<128>(p, max_keys, part_out, part_ml, num_splits, stream);
    case 256: return mma::launch_decode<256>(p, max_keys, part_out, part_ml, num_splits, stream);
    default: return;
  }
}

}  // namespace tide::cuda
