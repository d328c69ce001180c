// The CPU reference of Backend::fill_uniform: uniform_fill.h's values element by element (the CUDA fill is
// checked against this op bit for bit in tests/gpu), within [center - amplitude, center + amplitude), spread
// over the range, a function of (seed, index) only.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/uniform_fill.h"
#include "core/error.h"

namespace tide {
namespace {

TEST(CpuFill, UniformValuesOfSeedAndIndex) {
  CpuBackend cpu;
  const int64_t n = (int64_t{1} << 21) + 7;  // more than one thread's slice, and a ragged end
  Tensor t = cpu.alloc(DType::kF32, Shape{n});
  cpu.fill_uniform(t, 0.5f, 0.25f, 42);
  double sum = 0, sum_sq = 0;
  float lo = 1, hi = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = t.as<float>()[i];
    ASSERT_EQ(v, uniform_fill::value(42, static_cast<uint64_t>(i), 0.5f, 0.25f)) << i;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sum_sq += (v - 0.5) * (v - 0.5);
  }
  EXPECT_GE(lo, 0.25f);
  EXPECT_LT(hi, 0.75f);
  EXPECT_LT(lo, 0.2501f);
  EXPECT_GT(hi, 0.7499f);
  // Uniform on [0.25, 0.75): mean 0.5, variance 0.25^2 / 3; 2M samples put both within 0.5% of that.
  EXPECT_NEAR(sum / static_cast<double>(n), 0.5, 0.0025);
  EXPECT_NEAR(sum_sq / static_cast<double>(n), 0.0625 / 3, 0.0625 / 3 * 0.005);

  // A view of the same length filled with the same seed holds the same values; another seed differs.
  Tensor again = cpu.alloc(DType::kF32, Shape{2, 8});
  cpu.fill_uniform(again.slice_rows(1, 2), 0.5f, 0.25f, 42);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(again.as<float>()[8 + i], t.as<float>()[i]);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(again.as<float>()[i], 0.0f);  // the other row untouched
  cpu.fill_uniform(again, 0.5f, 0.25f, 43);
  int same = 0;
  for (int64_t i = 0; i < 16; ++i) same += again.as<float>()[i] == t.as<float>()[i];
  EXPECT_LT(same, 2);
}

TEST(CpuFill, ZeroAmplitudeIsTheCenterExactly) {
  CpuBackend cpu;
  Tensor t = cpu.alloc(DType::kF32, Shape{1000});
  cpu.fill_uniform(t, 1.0f, 0.0f, 7);
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.as<float>()[i], 1.0f);
  EXPECT_THROW(cpu.fill_uniform(cpu.alloc(DType::kI32, Shape{4}), 0.0f, 1.0f, 7), Error);
}

// The value in double then rounded once: a contracted (fused) and a separate multiply-add give the same bits.
TEST(CpuFill, ValueIsOneRoundingOfTheExactAffineMap) {
  for (uint64_t i = 0; i < 4096; ++i) {
    const float center = 0.1f, amplitude = 3e-3f;
    const float v = uniform_fill::value(9, i, center, amplitude);
    const float unit = uniform_fill::value(9, i, 0.0f, 1.0f);  // exact: v in steps of 2^-23
    const double exact = static_cast<double>(center) + static_cast<double>(amplitude) * static_cast<double>(unit);
    ASSERT_EQ(v, static_cast<float>(exact)) << i;
    ASSERT_EQ(v, static_cast<float>(std::fma(static_cast<double>(amplitude), static_cast<double>(unit), static_cast<double>(center))));
  }
}

}  // namespace
}  // namespace tide
