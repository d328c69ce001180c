// The arithmetic of Backend::fill_uniform, shared by the CPU reference and the CUDA kernel (plain C++17, like
// core/fp8.h), so both make the same values: element i of a fill with `seed` is a hash of (seed, i) mapped to
// 24-bit v in [-1, 1), and the value center + amplitude * v is computed in double, where the product of two
// 24-bit significands is exact, so a fused multiply-add and a separate multiply and add agree, then rounded
// once to f32. Not a statistics-grade generator: noise for weights no one reads for their meaning (dummy
// models, benchmarks).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TIDE_FILL_HD __host__ __device__ __forceinline__
#else
#define TIDE_FILL_HD inline
#endif

namespace tide::uniform_fill {

// SplitMix64's finalizer: every bit of x affects every bit of the result.
TIDE_FILL_HD uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Element i of the fill with `seed`: center + amplitude * v, v uniform in [-1, 1) in steps of 2^-23.
TIDE_FILL_HD float value(uint64_t seed, uint64_t i, float center, float amplitude) {
  const uint64_t h = mix(seed ^ (i * 0xd1342543de82ef95ull));
  const double v = static_cast<double>(static_cast<int64_t>(h >> 40) - (int64_t{1} << 23)) * (1.0 / 8388608.0);
  return static_cast<float>(static_cast<double>(center) + static_cast<double>(amplitude) * v);
}

}  // namespace tide::uniform_fill
