// The FP8 KV store alone (store_kv with --kv-cache-dtype fp8; the forward pass stores fused with RoPE,
// elementwise.cu): kv_fp8.cuh's store of each token.
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/launch.cuh"

namespace tide::cuda {
namespace {

constexpr int kWarps = 8;

// One CTA per token.
__global__ void __launch_bounds__(32 * kWarps)
    store_kv_fp8_kernel(uint8_t* __restrict__ codes, float* __restrict__ scales, const bf16* __restrict__ qkv,
                        const int64_t* __restrict__ slot_mapping, int64_t row_size, int64_t q_size,
                        int64_t num_heads_kv, int64_t head_dim, int64_t num_layers, int64_t layer,
                        int64_t block_size) {
  begin_dependent_kernel();
  const int64_t t = blockIdx.x, slot = slot_mapping[t];
  if (slot < 0) return;  // padding
  store_token_kv_fp8(codes, scales, qkv + t * row_size + q_size, slot, num_heads_kv, head_dim, num_layers, layer,
                     block_size, static_cast<int>(threadIdx.x) / 32, kWarps, static_cast<int>(threadIdx.x) % 32);
}

}  // namespace

void launch_store_kv_fp8(const KvStoreParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const int64_t q_size = p.num_heads * p.head_dim, row_size = q_size + 2 * p.num_heads_kv * p.head_dim;
  launch_kernel(store_kv_fp8_kernel, static_cast<unsigned>(p.num_tokens), 32 * kWarps, 0, stream, p.codes, p.scales,
                p.qkv, p.slot_mapping, row_size, q_size, p.num_heads_kv, p.head_dim, p.num_layers, p.layer,
                p.block_size);
}

}  // namespace tide::cuda
