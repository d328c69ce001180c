// The FP8 ops of the CPU backend: the reference of tide's FP8 numerics (core/fp8.h). Quantization is the
// shared integer arithmetic, so it is bit-exact with any backend that follows it; the matmul decodes the codes
// to f32 (products of two e4m3 values are exact in f32) and sums with OpenBLAS.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/fp8.h"

namespace tide {
namespace {

void check_dtype(const Tensor& t, DType dtype, const char* what) {
  if (t.dtype != dtype) fail("cpu backend: {} must be {}, got {}", what, dtype_name(dtype), dtype_name(t.dtype));
}

// The f32 values of an [R, K] tensor of e4m3 codes.
std::vector<float> decode(const Tensor& codes) {
  std::vector<float> table(256);
  for (int c = 0; c < 256; ++c) table[static_cast<size_t>(c)] = fp8::e4m3_to_float(static_cast<uint8_t>(c));
  std::vector<float> out(static_cast<size_t>(codes.numel()));
  const auto* in = codes.as<uint8_t>();
  for (size_t i = 0; i < out.size(); ++i) out[i] = table[in[i]];
  return out;
}

}  // namespace

// out8: [T, K] e4m3, scales: [T] f32, x: [T, K] f32
void CpuBackend::quantize_fp8(Tensor out8, Tensor scales, const Tensor& x) {
  check_dtype(x, DType::kF32, "quantize_fp8 input");
  check_dtype(out8, DType::kF8E4M3, "quantize_fp8 output");
  check_dtype(scales, DType::kF32, "quantize_fp8 scales");
  const int64_t rows = x.dim(0), k = x.dim(1);
  TIDE_CHECK(out8.shape == x.shape && scales.numel() == rows);
  // Rows are independent: slices of at least 2^20 elements each go to a thread of their own.
  parallel_for(rows, std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(k, 1)), [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      scales.as<float>()[t] = fp8::quantize_row(x.as<float>() + t * k, k, out8.as<uint8_t>() + t * k);
    }
  });
}

// out: [T, N] f32, x8: [T, K], x_scales: [T], w8: [N, K], w_scales: [N]
void CpuBackend::matmul_fp8(Tensor out, const Tensor& x8, const Tensor& x_scales, const Tensor& w8,
                            const Tensor& w_scales, float alpha) {
  check_dtype(x8, DType::kF8E4M3, "matmul_fp8 input");
  check_dtype(w8, DType::kF8E4M3, "matmul_fp8 weight");
  check_dtype(x_scales, DType::kF32, "matmul_fp8 input scales");
  check_dtype(w_scales, DType::kF32, "matmul_fp8 weight scales");
  check_dtype(out, DType::kF32, "matmul_fp8 output");
  const int64_t t = x8.dim(0), k = x8.dim(1), n = w8.dim(0);
  TIDE_CHECK(w8.dim(1) == k && out.dim(0) == t && out.dim(1) == n && x_scales.numel() == t && w_scales.numel() == n);
  if (t == 0) return;
  const std::vector<float> x = decode(x8), w = decode(w8);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(t), static_cast<int>(n), static_cast<int>(k),
              1.0f, x.data(), static_cast<int>(k), w.data(), static_cast<int>(k), 0.0f, out.as<float>(),
              static_cast<int>(n));
  for (int64_t r = 0; r < t; ++r) {
    const float row_scale = alpha * x_scales.as<float>()[r];
    float* o = out.as<float>() + r * n;
    for (int64_t j = 0; j < n; ++j) o[j] *= row_scale * w_scales.as<float>()[j];
  }
}

}  // namespace tide
