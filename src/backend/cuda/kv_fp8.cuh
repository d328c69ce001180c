// The FP8 KV store of one token (--kv-cache-dtype fp8; backend.h, KvStorage), shared by the store kernel
// (kv_fp8.cu) and the fused RoPE + store kernel (elementwise.cu): each head's K or V vector is written as E4M3
// codes with its own scale, fp8::kv_scale_for_amax, quantized as core/fp8.h does on the CPU (the same bits
// for the same values).
#pragma once

#include <cuda_bf16.h>

#include "core/fp8.h"

namespace tide::cuda {

// kv_row: the token's K heads, then its V heads (a qkv row past its q heads); `slot` >= 0. One warp per vector
// at a time: warp `warp` of `num_warps` takes vectors warp, warp + num_warps, ... (vector 2 h + kv: head h's K
// (kv 0) or V). Codes [num_blocks, num_layers, 2, block_size, Hkv * D], scales [num_blocks, num_layers, 2, Hkv,
// block_size].
__device__ __forceinline__ void store_token_kv_fp8(uint8_t* codes, float* scales, const __nv_bfloat16* kv_row,
                                                   int64_t slot, int64_t num_heads_kv, int64_t head_dim,
                                                   int64_t num_layers, int64_t layer, int64_t block_size, int warp,
                                                   int num_warps, int lane) {
  const int64_t block = slot / block_size, offset = slot % block_size, kv_size = num_heads_kv * head_dim;
  for (int64_t vec = warp; vec < 2 * num_heads_kv; vec += num_warps) {
    const int64_t kv = vec % 2, head = vec / 2;
    const __nv_bfloat16* x = kv_row + kv * kv_size + head * head_dim;
    float amax = 0.0f;
    for (int64_t i = lane; i < head_dim; i += 32) amax = fmaxf(amax, fabsf(__bfloat162float(x[i])));
#pragma unroll
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float scale = fp8::kv_scale_for_amax(amax);
    const int64_t layer_kv = (block * num_layers + layer) * 2 + kv;
    uint8_t* dst = codes + (layer_kv * block_size + offset) * kv_size + head * head_dim;
    for (int64_t i = lane; i < head_dim; i += 32) dst[i] = fp8::quantize(__bfloat162float(x[i]), scale);
    if (lane == 0) scales[(layer_kv * num_heads_kv + head) * block_size + offset] = scale;
  }
}

}  // namespace tide::cuda
