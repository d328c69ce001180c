// The values an FP8 KV cache keeps of one head's K or V vector, for tests comparing against it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/fp8.h"

namespace tide::test {

// x[0, d) replaced by e4m3(x / s) * s with s = fp8::kv_scale_for_amax (what an FP8 cache dequantizes to); its
// codes and scale in `codes` / `scale` when given.
inline void fp8_round_trip(float* x, int64_t d, uint8_t* codes = nullptr, float* scale = nullptr) {
  float amax = 0;
  for (int64_t i = 0; i < d; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float s = fp8::kv_scale_for_amax(amax);
  if (scale != nullptr) *scale = s;
  for (int64_t i = 0; i < d; ++i) {
    const uint8_t code = fp8::quantize(x[i], s);
    if (codes != nullptr) codes[i] = code;
    x[i] = fp8::e4m3_to_float(code) * s;
  }
}

}  // namespace tide::test
