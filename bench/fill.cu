// launch_fill_uniform_bf16: a grid-stride loop writing 8 bf16 (16 bytes) per thread and step, so filling
// the 16 GB of R7B's weights is bound by HBM write bandwidth (a few milliseconds).
#include <cuda_bf16.h>

#include <algorithm>

#include "bench/fill.h"

namespace tide::bench {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kPerThread = 8;

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [center - amplitude, center + amplitude) from the top 24 bits of the hash.
__device__ __forceinline__ __nv_bfloat16 sample(uint64_t seed, int64_t i, float center, float amplitude) {
  const uint64_t h = splitmix64(seed ^ (static_cast<uint64_t>(i) * 0xd1342543de82ef95ull));
  const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return __float2bfloat16(center + amplitude * (2.0f * u - 1.0f));
}

// data: [n] bf16, 16-byte aligned (the caching allocator hands out 512-byte aligned blocks).
__global__ void fill_uniform_kernel(__nv_bfloat16* data, int64_t n, float center, float amplitude, uint64_t seed) {
  const int64_t num_groups = (n + kPerThread - 1) / kPerThread;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < num_groups; g += stride) {
    const int64_t first = g * kPerThread;
    if (first + kPerThread <= n) {
      union {
        uint4 vec;
        __nv_bfloat16 elems[kPerThread];
      } pack;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) pack.elems[j] = sample(seed, first + j, center, amplitude);
      *reinterpret_cast<uint4*>(data + first) = pack.vec;
    } else {
      for (int64_t i = first; i < n; ++i) data[i] = sample(seed, i, center, amplitude);
    }
  }
}

}  // namespace

cudaError_t launch_fill_uniform_bf16(void* data, int64_t n, float center, float amplitude, uint64_t seed,
                                     cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (reinterpret_cast<uintptr_t>(data) % 16 != 0) return cudaErrorMisalignedAddress;
  const int64_t num_groups = (n + kPerThread - 1) / kPerThread;
  const int64_t blocks = std::min<int64_t>((num_groups + kThreads - 1) / kThreads, int64_t{132} * 64);
  fill_uniform_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(data), n,
                                                                             center, amplitude, seed);
  return cudaGetLastError();
}

}  // namespace tide::bench
