// The SwiGLU activation's arithmetic, shared by silu_mul and its FP8 fusion so both round the same bits.
#pragma once

#include <cuda_bf16.h>

namespace tide::cuda {

// silu(g) * u, rounded to bf16.
__device__ __forceinline__ __nv_bfloat16 silu_mul_value(float g, float u) {
  return __float2bfloat16(g / (1.0f + __expf(-g)) * u);
}

}  // namespace tide::cuda
