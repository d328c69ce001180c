// FP8 E4M3 numerics (core/fp8.h): every one of the 256 codes both ways, rounding ties to even, saturation,
// subnormals, and the error bound of rowwise quantization.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/fp8.h"

namespace tide {
namespace {

using namespace fp8;

// The value of code c from the format's definition, in double.
double reference_value(uint8_t c) {
  const int sign = (c & 0x80) ? -1 : 1, e = (c >> 3) & 0xF, m = c & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(m / 8.0, -6);
  return sign * std::ldexp(1.0 + m / 8.0, e - 7);
}

TEST(Fp8, EveryCodeDecodesToItsValueAndEncodesBack) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const double want = reference_value(code);
    const float got = e4m3_to_float(code);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c;
      EXPECT_EQ(e4m3_from_float(got) & 0x7F, kE4M3NaN) << c;
      ++nans;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << c;
    EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << c;  // -0 too
    EXPECT_EQ(e4m3_from_float(got), code) << c;
  }
  EXPECT_EQ(nans, 2);
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // the smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // the smallest normal
}

TEST(Fp8, RoundsToNearestWithTiesToEven) {
  // Between every two neighbouring finite codes: just below the midpoint, the midpoint, just above.
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = e4m3_to_float(static_cast<uint8_t>(c)), hi = e4m3_to_float(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact: both have few mantissa bits
    const uint8_t even = (c % 2 == 0) ? static_cast<uint8_t>(c) : static_cast<uint8_t>(c + 1);
    EXPECT_EQ(e4m3_from_float(mid), even) << "midpoint after code " << c;
    EXPECT_EQ(e4m3_from_float(std::nextafter(mid, 0.0f)), c) << c;
    EXPECT_EQ(e4m3_from_float(std::nextafter(mid, 1000.0f)), c + 1) << c;
    EXPECT_EQ(e4m3_from_float(-mid), 0x80 | even) << c;
  }
  // Below half the smallest subnormal: zero, with the sign kept.
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.0f, -11)), 0x00);
  EXPECT_EQ(e4m3_from_float(-std::ldexp(1.0f, -11)), 0x80);
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.0f, -10)), 0x00);                       // a tie: to 0 (even)
  EXPECT_EQ(e4m3_from_float(std::nextafter(std::ldexp(1.0f, -10), 1.0f)), 0x01);  // just above: 2^-9
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::denorm_min()), 0x00);
}

TEST(Fp8, SaturatesInsteadOfOverflowing) {
  for (float x : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, 3.4e38f, std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(e4m3_from_float(x), 0x7E) << x;
    EXPECT_EQ(e4m3_from_float(-x), 0xFE) << x;
  }
  EXPECT_EQ(e4m3_from_float(std::nextafter(448.0f, 0.0f)), 0x7E);
  EXPECT_EQ(e4m3_from_float(416.0f), 0x7D);  // 1.625 x 2^8
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::quiet_NaN()) & 0x7F, kE4M3NaN);
}

TEST(Fp8, RowwiseQuantizationErrorIsWithinHalfAStepOfEachValue) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float spread : {1e-4f, 1.0f, 300.0f, 1e5f}) {
    std::vector<float> row(4096);
    float amax = 0;
    for (float& v : row) {
      v = normal(rng) * spread;
      amax = std::max(amax, std::fabs(v));
    }
    const float scale = scale_for_amax(amax);
    EXPECT_EQ(e4m3_to_float(quantize(amax, scale)), 448.0f);  // the largest value maps to the top code
    for (float v : row) {
      const float back = e4m3_to_float(quantize(v, scale)) * scale;
      const double t = std::fabs(double{v}) / scale;  // |v| in units of the scale
      // Half a step of e4m3 at that magnitude (3 mantissa bits; 2^-10 absolute in the subnormal range).
      const double step = t < std::ldexp(1.0, -6) ? std::ldexp(1.0, -9) : std::ldexp(1.0, static_cast<int>(std::floor(std::log2(t))) - 3);
      EXPECT_LE(std::fabs(double{back} - v), (step / 2) * scale * (1 + 1e-6) + 1e-30) << v << " spread " << spread;
    }
  }
  EXPECT_EQ(scale_for_amax(0.0f), 1.0f);
  EXPECT_EQ(quantize(0.0f, scale_for_amax(0.0f)), 0x00);
}

// quantize_row: the scale of the row's largest magnitude (negative values count by magnitude, NaNs not at
// all) and each value's code with it; an all-zero row gets scale 1 and zero codes.
TEST(Fp8, QuantizeRowTakesTheScaleOfItsLargestMagnitude) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> row = {0.5f, -896.0f, nan, 3.0f, -0.0f};
  std::vector<uint8_t> codes(row.size());
  const float scale = quantize_row(row.data(), static_cast<int64_t>(row.size()), codes.data());
  EXPECT_EQ(scale, 2.0f);  // 896 / 448
  for (size_t i = 0; i < row.size(); ++i) {
    if (std::isnan(row[i])) {
      EXPECT_TRUE(std::isnan(e4m3_to_float(codes[i])));
    } else {
      EXPECT_EQ(codes[i], quantize(row[i], 2.0f)) << i;
    }
  }
  EXPECT_EQ(e4m3_to_float(codes[1]), -448.0f);
  const std::vector<float> zeros(7, 0.0f);
  std::vector<uint8_t> zero_codes(zeros.size(), 0xAA);
  EXPECT_EQ(quantize_row(zeros.data(), 7, zero_codes.data()), 1.0f);
  EXPECT_EQ(zero_codes, std::vector<uint8_t>(7, 0x00));
}

// The KV cache's scale: amax / 448 rounded up to 4 significant bits, so no code saturates, the largest value
// keeps a code of at least 448 / 1.125, and every code times the scale is an exact bf16 value (what the GPU's
// prefill attention relies on to dequantize in bf16).
TEST(Fp8, KvScaleHasFourSignificantBitsAndExactBf16Products) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  std::vector<float> amaxes = {896.0f, 448.0f, 1.0f, 3.0f, 1e-3f, 0.1f, 65504.0f};
  for (int e = -40; e <= 40; ++e) amaxes.push_back(std::ldexp(mantissa(rng), e));
  for (float amax : amaxes) {
    const float s = kv_scale_for_amax(amax), plain = scale_for_amax(amax);
    EXPECT_GE(s, plain) << amax;
    EXPECT_LT(double{s}, 1.125 * plain) << amax;
    EXPECT_EQ(bits_of(s) & ((1u << 20) - 1u), 0u) << amax;  // a 3-bit mantissa
    EXPECT_GE(e4m3_to_float(quantize(amax, s)), 384.0f) << amax;  // the e4m3 value just below 448 / 1.125
    for (int c = 0; c < 256; ++c) {
      const float code = e4m3_to_float(static_cast<uint8_t>(c));
      if (std::isnan(code)) continue;
      const double product = double{code} * s;
      const auto f = static_cast<float>(product);
      EXPECT_EQ(double{f}, product) << amax << " code " << c;
      EXPECT_EQ(bits_of(f) & 0xFFFFu, 0u) << amax << " code " << c;  // bf16: the top 16 bits of an f32
    }
  }
  EXPECT_EQ(kv_scale_for_amax(0.0f), 1.0f);
  EXPECT_EQ(kv_scale_for_amax(896.0f), 2.0f);  // already 4 significant bits: unchanged
  EXPECT_EQ(kv_scale_for_amax(900.0f), 2.25f);  // 900 / 448 = 2.0089...: up to the next 4-bit value
  const std::vector<float> row = {0.5f, -900.0f, 3.0f};
  std::vector<uint8_t> codes(row.size());
  EXPECT_EQ(quantize_row(row.data(), 3, codes.data(), /*kv=*/true), 2.25f);
  for (size_t i = 0; i < row.size(); ++i) EXPECT_EQ(codes[i], quantize(row[i], 2.25f)) << i;
}

}  // namespace
}  // namespace tide
