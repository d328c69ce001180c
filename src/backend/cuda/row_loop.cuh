// A CTA's strided pass over one row of f32 logits, shared by the sample and logprobs kernels.
#pragma once

#include <cstdint>

namespace tide::cuda {

// Calls f(i, logit) for every element of the row, each of the kThreads threads a strided share; float4
// loads when rows are 16-byte aligned (V a multiple of 4), kUnroll of them in flight per thread (one SM
// streams the row).
template <int kThreads, typename F>
__device__ __forceinline__ void for_each_logit(const float* row, int64_t vocab, F&& f) {
  constexpr int kUnroll = 4;
  if ((vocab & 3) == 0) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int64_t n4 = vocab / 4;
    for (int64_t j = threadIdx.x; j < n4; j += kUnroll * kThreads) {
      float4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (j + u * kThreads < n4) v[u] = row4[j + u * kThreads];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = 4 * (j + u * kThreads);
        if (j + u * kThreads < n4) {
          f(i, v[u].x);
          f(i + 1, v[u].y);
          f(i + 2, v[u].z);
          f(i + 3, v[u].w);
        }
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) f(i, row[i]);
  }
}

}  // namespace tide::cuda
