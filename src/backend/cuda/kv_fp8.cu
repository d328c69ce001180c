// The FP8 KV store (--kv-cache-dtype fp8; backend.h, KvStorage): each head's K or V vector of a token is
// written as E4M3 codes with its own scale, amax / 448, quantized as core/fp8.h does on the CPU (the same
// bits for the same values).
#include <cuda_bf16.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "core/fp8.h"

namespace tide::cuda {
namespace {

constexpr int kWarps = 8;

// One CTA per token, one warp per vector at a time (vector 2 h + kv: head h's K (kv 0) or V).
__global__ void __launch_bounds__(32 * kWarps)
    store_kv_fp8_kernel(uint8_t* __restrict__ codes, float* __restrict__ scales, const bf16* __restrict__ qkv,
                        const int64_t* __restrict__ slot_mapping, int64_t row_size, int64_t q_size,
                        int64_t num_heads_kv, int64_t head_dim, int64_t num_layers, int64_t layer,
                        int64_t block_size) {
  begin_dependent_kernel();
  const int64_t t = blockIdx.x, slot = slot_mapping[t];
  if (slot < 0) return;  // padding
  const int64_t block = slot / block_size, offset = slot % block_size, kv_size = num_heads_kv * head_dim;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  for (int64_t vec = warp; vec < 2 * num_heads_kv; vec += kWarps) {
    const int64_t kv = vec % 2, head = vec / 2;
    const bf16* x = qkv + t * row_size + q_size + kv * kv_size + head * head_dim;
    float amax = 0.0f;
    for (int64_t i = lane; i < head_dim; i += 32) amax = fmaxf(amax, fabsf(__bfloat162float(x[i])));
#pragma unroll
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = fp8::scale_for_amax(amax);
    const int64_t layer_kv = (block * num_layers + layer) * 2 + kv;
    uint8_t* dst = codes + (layer_kv * block_size + offset) * kv_size + head * head_dim;
    for (int64_t i = lane; i < head_dim; i += 32) dst[i] = fp8::quantize(__bfloat162float(x[i]), scale);
    if (lane == 0) scales[(layer_kv * num_heads_kv + head) * block_size + offset] = scale;
  }
}

}  // namespace

void launch_store_kv_fp8(uint8_t* codes, float* scales, const bf16* qkv, const int64_t* slot_mapping,
                         int64_t num_tokens, int64_t row_size, int64_t q_size, int64_t num_heads_kv, int64_t head_dim,
                         int64_t num_layers, int64_t layer, int64_t block_size, cudaStream_t stream) {
  if (num_tokens == 0) return;
  launch_kernel(store_kv_fp8_kernel, static_cast<unsigned>(num_tokens), 32 * kWarps, 0, stream, codes, scales, qkv,
                slot_mapping, row_size, q_size, num_heads_kv, head_dim, num_layers, layer, block_size);
}

}  // namespace tide::cuda
