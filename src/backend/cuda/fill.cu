// Backend::fill_uniform on the GPU: a grid-stride loop, each thread making 8 consecutive elements per step with
// uniform_fill.h's arithmetic (the CPU reference's values) and writing them with one 16-byte store (bf16) or two
// (f32), so filling a model's weights is bound by the memory's write bandwidth.
#include <algorithm>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/uniform_fill.h"

namespace tide::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kPerThread = 8;

__device__ __forceinline__ void store(bf16* data, int64_t i, float v) { data[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(float* data, int64_t i, float v) { data[i] = v; }

// data: [n], 16-byte aligned (the caching allocator's blocks are 512-byte aligned).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    fill_uniform_kernel(T* __restrict__ data, int64_t n, float center, float amplitude, uint64_t seed) {
  begin_dependent_kernel();  // an earlier kernel may still read the tensor's previous contents
  static_assert(kPerThread * sizeof(T) % 16 == 0);
  const int64_t num_groups = (n + kPerThread - 1) / kPerThread;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < num_groups; g += stride) {
    const int64_t first = g * kPerThread;
    if (first + kPerThread <= n) {
      union {
        uint4 vec[kPerThread * sizeof(T) / 16];
        T elems[kPerThread];
      } pack;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) store(pack.elems, j, uniform_fill::value(seed, first + j, center, amplitude));
#pragma unroll
      for (size_t v = 0; v < kPerThread * sizeof(T) / 16; ++v) reinterpret_cast<uint4*>(data + first)[v] = pack.vec[v];
    } else {
      for (int64_t i = first; i < n; ++i) store(data, i, uniform_fill::value(seed, i, center, amplitude));
    }
  }
}

}  // namespace

void launch_fill_uniform(const FillUniformParams& p, cudaStream_t stream) {
  if (p.n <= 0) return;
  TIDE_CHECK(reinterpret_cast<uintptr_t>(p.data) % 16 == 0);
  const int64_t num_groups = (p.n + kPerThread - 1) / kPerThread;
  // Enough CTAs for every SM of the largest GPUs many times over; each loops over the rest.
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((num_groups + kThreads - 1) / kThreads, 132 * 64));
  if (p.data_f32) {
    launch_kernel(fill_uniform_kernel<float>, blocks, kThreads, 0, stream, static_cast<float*>(p.data), p.n,
                  p.center, p.amplitude, p.seed);
  } else {
    launch_kernel(fill_uniform_kernel<bf16>, blocks, kThreads, 0, stream, static_cast<bf16*>(p.data), p.n,
                  p.center, p.amplitude, p.seed);
  }
}

}  // namespace tide::cuda
