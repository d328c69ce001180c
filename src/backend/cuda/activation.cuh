// The SwiGLU activation's arithmetic, shared by silu_mul and its FP8 fusion so both round the same bits.
#pragma once

#include <cuda_bf16.h>

namespace tide::cuda {

// silu(g) * u, rounded to bf16.
__device__ __forceinline__ __nv_bfloat16 silu_mul_value(float g, float u) {
  return __float2bfloat16(g / (1.0f + __expf(-g)) * u);
}

// silu_mul_value of 8 (gate, up) pairs: a 16-byte chunk of the gate half and the chunk of the up half at the same
// place, giving the output's 16-byte chunk.
__device__ __forceinline__ uint4 silu_mul8(const uint4& gate, const uint4& up) {
  const auto* g = reinterpret_cast<const __nv_bfloat16*>(&gate);
  const auto* u = reinterpret_cast<const __nv_bfloat16*>(&up);
  uint4 r;
  auto* out = reinterpret_cast<__nv_bfloat16*>(&r);
#pragma unroll
  for (int e = 0; e < 8; ++e) out[e] = silu_mul_value(__bfloat162float(g[e]), __bfloat162float(u[e]));
  return r;
}

}  // namespace tide::cuda
