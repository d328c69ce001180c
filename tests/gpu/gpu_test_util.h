// Helpers of the GPU tests: random bf16-representable inputs given to both backends, results back as f32.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"

namespace tide::test {

#define TIDE_REQUIRE_GPU() \
  if (!::tide::CudaBackend::available()) GTEST_SKIP() << "no CUDA device"

// A test on both backends: the CPU reference and the GPU (skipped without one).
class CpuAndCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TIDE_REQUIRE_GPU();
    gpu_ = std::make_unique<CudaBackend>();
  }
  CpuBackend cpu_;
  std::unique_ptr<CudaBackend> gpu_;
};

// Random values rounded to bf16, so both backends start from exactly the same numbers.
inline std::vector<float> random_bf16_values(size_t n, uint32_t seed, float scale = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(mean, scale);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(normal(rng)));
  return v;
}

// The same values on the CPU (f32) and on the GPU (bf16).
struct Pair {
  Tensor cpu, gpu;
};

inline Pair both(CpuBackend& cpu, CudaBackend& gpu, const std::vector<float>& values, Shape shape) {
  return {cpu.upload(values.data(), DType::kF32, shape), gpu.upload_as(values.data(), DType::kF32, shape, DType::kBF16)};
}

inline Pair both_i32(CpuBackend& cpu, CudaBackend& gpu, const std::vector<int32_t>& values, Shape shape) {
  return {cpu.upload(values.data(), DType::kI32, shape), gpu.upload(values.data(), DType::kI32, shape)};
}

inline Pair both_i64(CpuBackend& cpu, CudaBackend& gpu, const std::vector<int64_t>& values, Shape shape) {
  return {cpu.upload(values.data(), DType::kI64, shape), gpu.upload(values.data(), DType::kI64, shape)};
}

inline std::vector<float> to_f32(Backend& backend, const Tensor& t) {
  std::vector<unsigned char> raw(t.nbytes());
  backend.download(t, raw.data());
  std::vector<float> out(static_cast<size_t>(t.numel()));
  convert_to_f32(raw.data(), t.dtype, out.data(), out.size());
  return out;
}

// ||got - want|| / ||want||.
inline double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    norm += double{want[i]} * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// bf16 keeps 8 significant bits: one rounding of the output is a relative error of at most 2^-9 per element.
inline constexpr double kBf16Rounding = 1.0 / 512;

// A layer group's KV storage on `b`: the backend's activation dtype (F32 on the CPU, BF16 on the GPU), or FP8
// codes and scales.
inline KvStorage make_kv(Backend& b, bool fp8, int64_t blocks, int64_t layers, int64_t block_size,
                         const AttentionShape& s) {
  const int64_t kv_size = s.num_heads_kv * s.head_dim;
  KvStorage kv{b.alloc(fp8 ? DType::kF8E4M3 : b.activation_dtype(), Shape{blocks, layers, 2 * block_size, kv_size}),
               layers, block_size};
  if (fp8) kv.scales = b.alloc(DType::kF32, Shape{blocks, layers, 2 * s.num_heads_kv, block_size});
  return kv;
}

// Storage bytes (codes, then scales) as the host sees them.
inline std::vector<uint8_t> kv_bytes(Backend& b, const KvStorage& kv) {
  std::vector<uint8_t> out(kv_block_bytes(kv) * static_cast<size_t>(kv.data.dim(0)));
  b.download(kv.data, out.data());
  if (kv.fp8()) b.download(kv.scales, out.data() + kv.data.nbytes());
  return out;
}

}  // namespace tide::test
