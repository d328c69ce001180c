#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace tide {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kF8E4M3: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kF8E4M3: return "F8_E4M3";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kI32, DType::kI64, DType::kU8}) {
    if (dtype_name(d) == name) return d;
  }
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  float magnitude;
  if (exp == 0) {
    magnitude = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
  } else if (exp == 31) {
    magnitude = mant ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
  }
  uint32_t u;
  std::memcpy(&u, &magnitude, sizeof u);
  u |= sign;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00u;
  if (a >= 65520.0f) return sign | 0x7c00u;  // overflow rounds to infinity
  if (a < std::ldexp(1.0f, -14)) {           // subnormal: units of 2^-24, round to nearest even
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t mant = static_cast<uint32_t>(std::nearbyint(std::ldexp(m, 11)));  // 11 significant bits
  int exp = e - 1 + 15;
  if (mant == 2048) {  // rounding carried into the next binade
    mant = 1024;
    ++exp;
  }
  if (exp >= 31) return sign | 0x7c00u;
  return sign | static_cast<uint16_t>((exp << 10) | (mant & 0x3ffu));
}

void convert_to_f32(const void* src, DType src_dtype, float* dst, size_t count) {
  switch (src_dtype) {
    case DType::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    // Sources may be unaligned (tensor data inside a file mapping), so elements are read with memcpy.
    case DType::kBF16: {
      const auto* s = static_cast<const unsigned char*>(src);
      for (size_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, s + 2 * i, 2);
        dst[i] = bf16_to_f32(bits);
      }
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const unsigned char*>(src);
      for (size_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, s + 2 * i, 2);
        dst[i] = f16_to_f32(bits);
      }
      return;
    }
    default:
      fail("cannot convert {} to F32", dtype_name(src_dtype));
  }
}

}  // namespace tide
