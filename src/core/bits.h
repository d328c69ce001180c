// The bits of an f32 and back, on the host and in CUDA device code alike: the integer arithmetic of the FP8
// conversions (fp8.h) and of the sampling keys (backend/sampling_math.h) starts from them. Plain C++17.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TIDE_BITS_HD __host__ __device__ __forceinline__
#else
#define TIDE_BITS_HD inline
#endif

namespace tide {

TIDE_BITS_HD uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  __builtin_memcpy(&u, &x, 4);
  return u;
#endif
}

TIDE_BITS_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  __builtin_memcpy(&x, &u, 4);
  return x;
#endif
}

}  // namespace tide
