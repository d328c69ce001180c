// FP8 E4M3 (OCP "E4M3FN": 1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no infinities, NaN =
// S.1111.111, largest finite 448) and the quantization numerics of tide's FP8 path (compressed-tensors'
// FP8 checkpoints): one f32 scale per weight row or per activation token, scale = amax / 448 (1 when amax is 0),
// per K or V vector of an FP8 KV cache the same rounded up to 4 significant bits (kv_scale_for_amax),
// q = e4m3(x / scale) rounded to nearest even and saturated to +-448. Integer-only conversions and single
// IEEE divisions, so the CPU reference, the checkpoint writer and the CUDA kernels (which include this header;
// plain C++17) compute the same bits; the GPU's own cvt.rn.satfinite.e4m3x2.f32 rounds the same way.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace tide::fp8 {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr uint8_t kE4M3NaN = 0x7F;

// m / 2^shift rounded to nearest, ties to even (shift >= 1).
TIDE_HD uint32_t shift_round_even(uint32_t m, uint32_t shift) {
  if (shift >= 32) return 0;
  const uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

// f32 -> e4m3, round to nearest even, saturating (|x| > 448 and infinities give +-448); NaN gives NaN.
TIDE_HD uint8_t e4m3_from_float(float x) {
  const uint32_t u = bits_of(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | kE4M3NaN;
  if (a >= 0x43E00000u) return sign | 0x7E;  // >= 448 (ties above 448 round down to it: 448 is even)
  if (a < 0x00800000u) return sign;          // f32 zero or subnormal: far below e4m3's 2^-9
  const int32_t exp = static_cast<int32_t>(a >> 23) - 127;
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;  // 1.m x 2^23
  if (exp < -6) {
    // e4m3 subnormal: q x 2^-9 with q = round(x x 2^9) in [0, 8]; 8 is the smallest normal's code.
    return sign | static_cast<uint8_t>(shift_round_even(mant, static_cast<uint32_t>(14 - exp)));
  }
  const uint32_t r = shift_round_even(mant, 20);  // 1.mmm x 8, in [8, 16]
  const uint32_t e = static_cast<uint32_t>(exp + 7) + (r == 16 ? 1u : 0u);
  return sign | static_cast<uint8_t>((e << 3) | (r == 16 ? 0u : r - 8));
}

// e4m3 -> f32 (exact).
TIDE_HD float e4m3_to_float(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 0xFu, m = c & 7u;
  if (e == 15 && m == 7) return float_of(sign | 0x7FC00000u);
  if (e == 0) return float_of(sign | bits_of(static_cast<float>(m) * 0.001953125f));  // m x 2^-9
  return float_of(sign | ((e - 7 + 127) << 23) | (m << 20));
}

// The scale of a row (or token) whose largest magnitude is `amax`: amax / 448, or 1 for an all-zero row.
TIDE_HD float scale_for_amax(float amax) { return amax > 0.0f ? amax / kE4M3Max : 1.0f; }

// A value quantized with `scale` (a single rounded division, then e4m3 rounding and saturation).
TIDE_HD uint8_t quantize(float x, float scale) { return e4m3_from_float(x / scale); }

// The scale of a K or V vector in an FP8 KV cache: scale_for_amax rounded up to 4 significant bits (a 3-bit
// mantissa, like a code's), so between 1 and 1.125 times amax / 448 and no code saturates. A code (4
// significant bits) times such a scale has at most 8 significant bits: an exact bf16 value wherever it is a
// normal one, which lets the GPU's prefill attention dequantize a tile in bf16 arithmetic without rounding.
// The codes keep e4m3's relative precision (3 mantissa bits at every magnitude down to scale * 2^-6).
TIDE_HD float kv_scale_for_amax(float amax) {
  const uint32_t low = (1u << 20) - 1u;  // the 20 mantissa bits below the top 3
  return float_of((bits_of(scale_for_amax(amax)) + low) & ~low);
}

// n values quantized with one scale of their largest magnitude (NaNs do not count; infinities do):
// kv_scale_for_amax for a K or V vector (`kv`), else scale_for_amax; codes[i] = quantize(x[i], scale). Returns
// the scale.
TIDE_HD float quantize_row(const float* x, int64_t n, uint8_t* codes, bool kv = false) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = x[i] < 0.0f ? -x[i] : x[i];
    if (a > amax) amax = a;
  }
  const float scale = kv ? kv_scale_for_amax(amax) : scale_for_amax(amax);
  for (int64_t i = 0; i < n; ++i) codes[i] = quantize(x[i], scale);
  return scale;
}

}  // namespace tide::fp8
