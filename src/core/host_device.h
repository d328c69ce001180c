// What the CPU reference and the CUDA kernels share: TIDE_HD marks a function both compile (a forced-inline
// __host__ __device__ function under nvcc, a plain inline one in host C++), and the bit casts between an f32
// and its IEEE bits that the integer-only numerics (core/fp8.h, backend/sampling_math.h) are written in.
// Plain C++17: the CUDA files include it.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TIDE_HD __host__ __device__ __forceinline__
#else
#define TIDE_HD inline
#endif

namespace tide {

// The IEEE bits of an f32.
TIDE_HD uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  return u;
#endif
}

// The f32 of IEEE bits.
TIDE_HD float float_of(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  __builtin_memcpy(&x, &u, 4);
  return x;
#endif
}

}  // namespace tide
