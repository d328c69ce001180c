// Element types and scalar conversions (bf16, f16, fp8 e4m3 <-> f32). Host code only; knows no model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tide {

enum class DType : uint8_t { kF32, kF16, kBF16, kF8E4M3, kI32, kI64, kU8 };

// Bytes per element.
size_t dtype_size(DType dtype);
// Canonical safetensors spelling ("F32", "BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType dtype);
// Parses a safetensors dtype string; nullopt when tide does not know it.
std::optional<DType> parse_dtype(std::string_view name);

// --- Scalar conversions ---

inline float bf16_to_f32(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float f);

// Converts `count` elements of `src_dtype` at `src` to f32. Supports F32, F16, BF16.
void convert_to_f32(const void* src, DType src_dtype, float* dst, size_t count);

}  // namespace tide
