// One warp's tensor-core steps of the decode attention kernel (decode_attention.cuh), with the keys as the mma's
// M and the query rows as its N in tiles of 8: S^T = K Q^T over the warp's 16 landed keys, O^T += V^T P^T, the
// query's B fragments in registers, P^T's from S^T's accumulators by movmatrix, FP8 codes widened in
// registers. Included by decode_attention.cuh only; not a public header.
#pragma once

#include "backend/cuda/mma_attention.cuh"

namespace tide::cuda::mma {

// The transpose of an 8x8 b16 matrix held as an mma fragment (lane 4 g + t: row g, columns 2t, 2t + 1).
__device__ __forceinline__ uint32_t transpose_8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// The ldmatrix address of lane `lane` in a landed FP8 stage's codes (K or V, rows Fp8KvStage::kRowBytes
// apart): matrix m = lane / 8 holds keys 8 (m % 2) .. + 8 and the 16 codes of dims 16 (2 c + m / 2) .. + 16.
template <int D>
__device__ __forceinline__ uint32_t fp8_codes_matrix(uint32_t codes, int c, int lane) {
  return codes + (8 * ((lane / 8) % 2) + lane % 8) * Fp8KvStage<D, 16>::kRowBytes + (2 * c + lane / 16) * 16;
}

// One warp's S^T = K Q^T over its 16 landed keys (the mma's M) and the CTA's query rows (N, in kN tiles of 8):
// s[n] holds keys g, g + 8 (lane 4 g + t) by rows 8 n + 2t, 8 n + 2t + 1. The query's B fragments q live in
// registers for the whole kernel; at head_dim <= 128 two accumulators per tile halve the chain of dependent mmas
// (at 256 the registers are short: one).
// bf16: k_tile is the slice's swizzled K tile. FP8: the slice's K codes, the query's dims permuted to match
// (load_decode_query); unscaled.
template <int D, bool kFp8, int kN>
__device__ __forceinline__ void decode_scores(float (&s)[kN][4], const uint32_t (&q)[kN][D / 16][2], uint32_t k_tile,
                                              int lane) {
  constexpr bool kTwo = D <= 128;
  float s2[kN][4] = {};
  if constexpr (kFp8) {
#pragma unroll
    for (int kk = 0; kk < D / 32; ++kk) {
      // Lane 4 g + t gets codes 4t .. 4t + 3 of key g of each matrix, which stand for k = 2t, 2t + 1 (bytes
      // 0, 1) and 2t + 8, 2t + 9 (bytes 2, 3).
      uint32_t k4[4];
      ldmatrix_x4(k4, fp8_codes_matrix<D>(k_tile, kk, lane));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        constexpr uint32_t kLow = widen_selector(0, 1), kHigh = widen_selector(2, 3);
        const uint32_t a[4] = {widen_pair(k4[2 * h], kLow), widen_pair(k4[2 * h + 1], kLow),
                               widen_pair(k4[2 * h], kHigh), widen_pair(k4[2 * h + 1], kHigh)};
#pragma unroll
        for (int n = 0; n < kN; ++n) mma_bf16(kTwo && h ? s2[n] : s[n], a, q[n][2 * kk + h][0], q[n][2 * kk + h][1]);
      }
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];  // keys 0-7 / 8-15 by dims 16 kk + 0-7 / 8-15
      ldmatrix_x4(a, k_tile + swizzle<D>(8 * ((lane / 8) % 2) + lane % 8, 2 * kk + lane / 16));
#pragma unroll
      for (int n = 0; n < kN; ++n) mma_bf16(kTwo && kk % 2 ? s2[n] : s[n], a, q[n][kk][0], q[n][kk][1]);
    }
  }
  if constexpr (kTwo) {
#pragma unroll
    for (int n = 0; n < kN; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] += s2[n][e];
    }
  }
}

// O^T += V^T P^T over the warp's 16 landed keys: b / b_tail are P^T's B fragments (keys by rows) as a bf16 head
// and tail. o[m][n] holds rows 8 n + 2t, 8 n + 2t + 1 of dims decode_dims(m, lane).
template <int D, bool kFp8, int kN>
__device__ __forceinline__ void decode_pv(float (&o)[D / 16][kN][4], const uint32_t (&b)[kN][2],
                                          const uint32_t (&b_tail)[kN][2], uint32_t v_tile, int lane) {
  if constexpr (kFp8) {
#pragma unroll
    for (int cc = 0; cc < D / 32; ++cc) {
      // Transposed, each matrix gives lane 4 g + t codes 2g, 2g + 1 of keys 2t and 2t + 1: bytes (0, 2) dim 2g
      // of both keys, bytes (1, 3) dim 2g + 1's.
      uint32_t v4[4];
      ldmatrix_x4_trans(v4, fp8_codes_matrix<D>(v_tile, cc, lane));
#pragma unroll
      for (int odd = 0; odd < 2; ++odd) {
        const uint32_t selector = odd ? widen_selector(1, 3) : widen_selector(0, 2);
        const uint32_t a[4] = {widen_pair(v4[0], selector), widen_pair(v4[2], selector), widen_pair(v4[1], selector),
                               widen_pair(v4[3], selector)};
#pragma unroll
        for (int n = 0; n < kN; ++n) {
          mma_bf16(o[2 * cc + odd][n], a, b[n][0], b[n][1]);
          mma_bf16(o[2 * cc + odd][n], a, b_tail[n][0], b_tail[n][1]);
        }
      }
    }
  } else {
#pragma unroll
    for (int m = 0; m < D / 16; ++m) {
      uint32_t a[4];  // dims 16 m + 0-7 / 8-15 by keys 0-7 / 8-15
      ldmatrix_x4_trans(a, v_tile + swizzle<D>(8 * (lane / 16) + lane % 8, 2 * m + (lane / 8) % 2));
#pragma unroll
      for (int n = 0; n < kN; ++n) {
        mma_bf16(o[m][n], a, b[n][0], b[n][1]);
        mma_bf16(o[m][n], a, b_tail[n][0], b_tail[n][1]);
      }
    }
  }
}

// The dims of o[m][n][0..1] (first) and o[m][n][2..3] (second) for lane 4 g + t.
template <int D, bool kFp8>
__device__ __forceinline__ int2 decode_dims(int m, int lane) {
  const int g = lane / 4;
  if constexpr (kFp8) {  // m = 2 cc + odd: dims 32 cc + 2g + odd and 16 more
    return make_int2(32 * (m / 2) + 2 * g + m % 2, 32 * (m / 2) + 16 + 2 * g + m % 2);
  } else {
    return make_int2(16 * m + g, 16 * m + 8 + g);
  }
}

// The query rows' B fragments: q[n][c] holds row 8 n + g's dims 16 c + 2t, 2t + 1 and 16 c + 2t + 8, 2t + 9
// (bf16 cache), or 16 c + 4t .. 4t + 3 (FP8: the order of decode_scores' widened codes). Rows past `rows` are
// zero queries whose results are never written. Row r is head r % group of token r / group.
template <int D, bool kFp8, int kN>
__device__ __forceinline__ void load_decode_query(uint32_t (&q)[kN][D / 16][2], const bf16* q_rows, int rows,
                                                  int group, int64_t token_stride, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    const int r = 8 * n + g;
    const bf16* row = q_rows + (r < rows ? (r / group) * token_stride + (r % group) * D : 0);
#pragma unroll
    for (int c = 0; c < D / 16; ++c) {
      if constexpr (kFp8) {
        const uint2 w = r < rows ? __ldg(reinterpret_cast<const uint2*>(row + 16 * c + 4 * t)) : make_uint2(0, 0);
        q[n][c][0] = w.x, q[n][c][1] = w.y;
      } else {
        const uint32_t* words = reinterpret_cast<const uint32_t*>(row + 16 * c + 2 * t);
        q[n][c][0] = r < rows ? __ldg(words) : 0u;
        q[n][c][1] = r < rows ? __ldg(words + 4) : 0u;
      }
    }
  }
}

}  // namespace tide::cuda::mma
