// Reductions of one value per thread over a whole block of kThreads threads (a multiple of 32), shared by
// the row kernels (layer norm, FP8 quantization). Every thread gets the result.
#pragma once

namespace tide::cuda {

// `shared`: kThreads / 32 floats. Safe to call back to back with the same buffer.
template <int kThreads, typename Op>
__device__ __forceinline__ float block_reduce(float v, float* shared, Op op) {
  for (int o = 16; o > 0; o /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // `shared` may still be read by the previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = shared[0];
  for (int w = 1; w < kThreads / 32; ++w) total = op(total, shared[w]);
  return total;
}

template <int kThreads>
__device__ __forceinline__ float block_sum(float v, float* shared) {
  return block_reduce<kThreads>(v, shared, [](float a, float b) { return a + b; });
}

template <int kThreads>
__device__ __forceinline__ float block_max(float v, float* shared) {
  return block_reduce<kThreads>(v, shared, [](float a, float b) { return fmaxf(a, b); });
}

}  // namespace tide::cuda
