// The CPU backend's FP8 ops against direct formulas: per-token quantization (scales and codes from
// core/fp8.h), the FP8 LayerNorm (the norm, then the quantization), and the FP8 matmul against a double
// product of the decoded values times both scales.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/fp8.h"

namespace tide {
namespace {

std::vector<float> random_values(size_t n, uint32_t seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(CpuFp8, QuantizePerTokenUsesEachRowsAmax) {
  CpuBackend cpu;
  std::vector<float> x = random_values(3 * 64, 1, 2.0f);
  for (int i = 0; i < 64; ++i) x[64 + static_cast<size_t>(i)] *= 1000;  // rows of very different ranges
  for (int i = 0; i < 64; ++i) x[128 + static_cast<size_t>(i)] = 0;     // and an all-zero row
  const Tensor xt = cpu.upload(x.data(), DType::kF32, Shape{3, 64});
  Tensor q = cpu.alloc(DType::kF8E4M3, Shape{3, 64}), s = cpu.alloc(DType::kF32, Shape{3});
  cpu.quantize_fp8(q, s, xt);
  for (int r = 0; r < 3; ++r) {
    float amax = 0;
    for (int i = 0; i < 64; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * 64 + i)]));
    EXPECT_EQ(s.as<float>()[r], fp8::scale_for_amax(amax)) << r;
    for (int i = 0; i < 64; ++i) {
      const size_t at = static_cast<size_t>(r * 64 + i);
      EXPECT_EQ(q.as<uint8_t>()[at], fp8::quantize(x[at], s.as<float>()[r])) << r << " " << i;
    }
  }
  EXPECT_EQ(s.as<float>()[2], 1.0f);
  EXPECT_THROW(cpu.quantize_fp8(cpu.alloc(DType::kBF16, Shape{3, 64}), s, xt), Error);
}

TEST(CpuFp8, LayerNormFp8IsTheNormThenTheQuantization) {
  CpuBackend cpu;
  const std::vector<float> x = random_values(5 * 96, 2, 3.0f), w = random_values(96, 3, 1.0f);
  const Tensor xt = cpu.upload(x.data(), DType::kF32, Shape{5, 96}), wt = cpu.upload(w.data(), DType::kF32, Shape{96});
  Tensor normed = cpu.alloc(DType::kF32, Shape{5, 96});
  cpu.layer_norm(normed, xt, wt, 1e-5f);
  Tensor q1 = cpu.alloc(DType::kF8E4M3, Shape{5, 96}), s1 = cpu.alloc(DType::kF32, Shape{5});
  cpu.quantize_fp8(q1, s1, normed);
  Tensor q2 = cpu.alloc(DType::kF8E4M3, Shape{5, 96}), s2 = cpu.alloc(DType::kF32, Shape{5});
  cpu.layer_norm_fp8(q2, s2, xt, wt, 1e-5f, cpu.alloc(DType::kF32, Shape{5, 96}));
  EXPECT_EQ(std::vector<uint8_t>(q1.as<uint8_t>(), q1.as<uint8_t>() + 5 * 96),
            std::vector<uint8_t>(q2.as<uint8_t>(), q2.as<uint8_t>() + 5 * 96));
  EXPECT_EQ(std::vector<float>(s1.as<float>(), s1.as<float>() + 5), std::vector<float>(s2.as<float>(), s2.as<float>() + 5));
}

TEST(CpuFp8, MatmulIsTheDecodedProductTimesBothScales) {
  CpuBackend cpu;
  const int64_t t = 7, k = 200, n = 33;
  std::mt19937 rng(4);
  std::vector<uint8_t> x8(static_cast<size_t>(t * k)), w8(static_cast<size_t>(n * k));
  auto random_code = [&] {
    const auto c = static_cast<uint8_t>(rng() % 256);
    return (c & 0x7F) == 0x7F ? uint8_t{0x42} : c;  // every finite code, no NaN
  };
  for (uint8_t& c : x8) c = random_code();
  for (uint8_t& c : w8) c = random_code();
  const std::vector<float> xs = {0.5f, 1.0f, 2e-3f, 7.0f, 1.0f, 0.25f, 3.0f};
  std::vector<float> ws(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) ws[static_cast<size_t>(j)] = 0.01f * static_cast<float>(j + 1);
  Tensor out = cpu.alloc(DType::kF32, Shape{t, n});
  cpu.matmul_fp8(out, cpu.upload(x8.data(), DType::kF8E4M3, Shape{t, k}), cpu.upload(xs.data(), DType::kF32, Shape{t}),
                 cpu.upload(w8.data(), DType::kF8E4M3, Shape{n, k}), cpu.upload(ws.data(), DType::kF32, Shape{n}), 0.5f);
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0, mag = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double p = double{fp8::e4m3_to_float(x8[static_cast<size_t>(r * k + i)])} *
                         fp8::e4m3_to_float(w8[static_cast<size_t>(j * k + i)]);
        dot += p;
        mag += std::fabs(p);
      }
      const double want = 0.5 * xs[static_cast<size_t>(r)] * ws[static_cast<size_t>(j)] * dot;
      const double bound = 0.5 * xs[static_cast<size_t>(r)] * ws[static_cast<size_t>(j)] * mag * 1e-5 + 1e-30;
      EXPECT_NEAR(out.as<float>()[r * n + j], want, bound) << r << " " << j;
    }
  }
}

}  // namespace
}  // namespace tide
