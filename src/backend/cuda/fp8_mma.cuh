// Pieces the small-batch matmul kernels share (fp8_small_matmul.cu, fp8_stream_matmul.cu): one m16n8k32
// e4m3 and one m16n8k16 bf16 tensor-core product, and the conversion of a finished f32 sum to the output type.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace tide::cuda {

// d = a . b (m16n8k32, e4m3 inputs, f32 result) from zero.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}

// d = a . b (m16n8k16, bf16 inputs, f32 result) from zero; the fragments' registers as mma_e4m3's.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %10, %10, %10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
}

template <typename Out>
__device__ __forceinline__ Out to_out(float v);
template <>
__device__ __forceinline__ float to_out<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 to_out<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}

// The token rows lane (g, q) of a warp reads: token 8 j + g for n-tile j, from byte 16 q of each 64-byte step
// of K. Tokens past num_tokens read nothing (has[j] false; the pointer is then token 0's).
template <int kNTiles>
struct TokenRows {
  const uint8_t* row[kNTiles];
  bool has[kNTiles];

  __device__ __forceinline__ TokenRows(const uint8_t* x8, int num_tokens, int k, int g, int q) {
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      has[j] = 8 * j + g < num_tokens;
      row[j] = x8 + static_cast<int64_t>(has[j] ? 8 * j + g : 0) * k + 16 * q;
    }
  }
};

}  // namespace tide::cuda
