// Division by a divisor fixed for a kernel launch (the KV cache's block size), plain C++ so the host tests check
// the arithmetic the kernels run. A division by a runtime value compiles to some twenty instructions on the GPU
// (a reciprocal estimate and its corrections); the attention kernels' K/V copies divide every key they gather,
// and in the decode kernel that integer work was as large as the widening of FP8 codes. Here n / d is one
// multiply-high, an add and a shift (Granlund and Montgomery's round-up method): with s = ceil(log2 d) and
// m = floor(2^32 (2^s - d) / d) + 1, n / d = (mulhi(n, m) + n) >> s for every 0 <= n < 2^31.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace tide {

struct FastDivmod {
  uint32_t divisor = 1, mul = 0, shift = 0;

  // 1 <= d < 2^31.
  static FastDivmod make(uint32_t d) {
    uint32_t s = 0;
    while ((uint64_t{1} << s) < d) ++s;
    const uint64_t m = ((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1;
    return FastDivmod{d, static_cast<uint32_t>(m), s};
  }

  // n / divisor for 0 <= n < 2^31 (mulhi(n, m) <= n, so the sum stays below 2^32).
  TIDE_HD uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, mul);
#else
    const uint32_t hi = static_cast<uint32_t>((uint64_t{n} * mul) >> 32);
#endif
    return (hi + n) >> shift;
  }
  // n % divisor, given q = div(n).
  TIDE_HD uint32_t mod(uint32_t n, uint32_t q) const { return n - q * divisor; }
};

}  // namespace tide
