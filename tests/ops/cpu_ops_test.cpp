// The CPU backend's ops against direct double-precision formulas on random inputs: the reference ops
// must themselves be right before other backends are compared with them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <tuple>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/fp8.h"

namespace tide {
namespace {

Tensor random_tensor(CpuBackend& b, Shape shape, std::mt19937& rng, float scale = 1.0f) {
  Tensor t = b.alloc(DType::kF32, shape);
  std::normal_distribution<float> dist(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] = dist(rng);
  return t;
}

TEST(CpuOps, LayerNormMatchesFormula) {
  CpuBackend b;
  std::mt19937 rng(1);
  const Tensor x = random_tensor(b, Shape{5, 96}, rng, 3.0f);
  const Tensor w = random_tensor(b, Shape{96}, rng);
  Tensor out = b.alloc(DType::kF32, Shape{5, 96});
  b.layer_norm(out, x, w, 1e-5f);
  for (int t = 0; t < 5; ++t) {
    double mean = 0, var = 0;
    for (int i = 0; i < 96; ++i) mean += x.as<float>()[t * 96 + i];
    mean /= 96;
    for (int i = 0; i < 96; ++i) var += std::pow(x.as<float>()[t * 96 + i] - mean, 2);
    var /= 96;
    for (int i = 0; i < 96; ++i) {
      const double want = w.as<float>()[i] * (x.as<float>()[t * 96 + i] - mean) / std::sqrt(var + 1e-5);
      EXPECT_NEAR(out.as<float>()[t * 96 + i], want, 1e-5 * (1 + std::fabs(want)));
    }
  }
}

TEST(CpuOps, MatmulIsXTimesWTransposedScaled) {
  CpuBackend b;
  std::mt19937 rng(2);
  const Tensor x = random_tensor(b, Shape{3, 17}, rng);
  const Tensor w = random_tensor(b, Shape{11, 17}, rng);
  Tensor out = b.alloc(DType::kF32, Shape{3, 11});
  b.matmul(out, x, w, 0.25f);
  for (int t = 0; t < 3; ++t) {
    for (int n = 0; n < 11; ++n) {
      double want = 0;
      for (int k = 0; k < 17; ++k) want += double{x.as<float>()[t * 17 + k]} * w.as<float>()[n * 17 + k];
      EXPECT_NEAR(out.as<float>()[t * 11 + n], 0.25 * want, 1e-5);
    }
  }
}

TEST(CpuOps, RopeRotatesConsecutivePairsOfTheFirstHeadsOnly) {
  CpuBackend b;
  std::mt19937 rng(3);
  const int64_t d = 8, heads = 3, rope_heads = 2;
  Tensor qkv = random_tensor(b, Shape{2, heads * d}, rng);
  std::vector<float> before(qkv.as<float>(), qkv.as<float>() + qkv.numel());
  const int32_t pos_values[2] = {0, 1000};
  const Tensor positions = b.upload(pos_values, DType::kI32, Shape{2});
  std::vector<float> inv_freq;
  for (int j = 0; j < d / 2; ++j) inv_freq.push_back(static_cast<float>(std::pow(50000.0, -2.0 * j / d)));
  b.rope(qkv, positions, b.upload(inv_freq.data(), DType::kF32, Shape{d / 2}), rope_heads);
  for (int t = 0; t < 2; ++t) {
    for (int h = 0; h < heads; ++h) {
      for (int j = 0; j < d / 2; ++j) {
        const size_t i = static_cast<size_t>(t * heads * d + h * d + 2 * j);
        const double angle = h < rope_heads ? pos_values[t] * std::pow(50000.0, -2.0 * j / d) : 0.0;
        const double y0 = before[i] * std::cos(angle) - before[i + 1] * std::sin(angle);
        const double y1 = before[i + 1] * std::cos(angle) + before[i] * std::sin(angle);
        // f32 angles at position 1000 are off by up to ~1e-4 rad, as in transformers.
        EXPECT_NEAR(qkv.as<float>()[i], y0, 5e-4) << t << " " << h << " " << j;
        EXPECT_NEAR(qkv.as<float>()[i + 1], y1, 5e-4);
      }
    }
  }
}

TEST(CpuOps, SiluMulAndAdd) {
  CpuBackend b;
  std::mt19937 rng(4);
  const Tensor gate_up = random_tensor(b, Shape{2, 10}, rng);
  Tensor out = b.alloc(DType::kF32, Shape{2, 5});
  b.silu_mul(out, gate_up);
  for (int t = 0; t < 2; ++t) {
    for (int i = 0; i < 5; ++i) {
      const double g = gate_up.as<float>()[t * 10 + i], u = gate_up.as<float>()[t * 10 + 5 + i];
      EXPECT_NEAR(out.as<float>()[t * 5 + i], g / (1 + std::exp(-g)) * u, 1e-6);
    }
  }
  Tensor sum = b.alloc(DType::kF32, Shape{2, 5});
  b.add(sum, out, out);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(sum.as<float>()[i], 2 * out.as<float>()[i]);
}

TEST(CpuOps, EmbeddingRejectsOutOfRangeIds) {
  CpuBackend b;
  std::mt19937 rng(5);
  const Tensor table = random_tensor(b, Shape{4, 3}, rng);
  const int32_t ids[2] = {3, 4};
  Tensor out = b.alloc(DType::kF32, Shape{2, 3});
  EXPECT_THROW(b.embedding(out, table, b.upload(ids, DType::kI32, Shape{2})), Error);
}

TEST(CpuOps, StoreKvWritesEachSlotAndSkipsPadding) {
  CpuBackend b;
  std::mt19937 rng(6);
  const AttentionShape shape{2, 1, 4};  // rows: 2 q heads, k, v of 4
  const Tensor qkv = random_tensor(b, Shape{3, 16}, rng);
  const int64_t slots[3] = {5, -1, 0};  // block 1 offset 1, padding, block 0 offset 0
  KvStorage kv{b.alloc(DType::kF32, Shape{2, 1, 2 * 4, 4}), 1, 4};  // 2 blocks of 4 positions, one layer
  b.store_kv(kv, 0, qkv, b.upload(slots, DType::kI64, Shape{3}), shape);
  const float* cache = kv.data.as<float>();
  const float* row0 = qkv.as<float>();
  const float* row2 = qkv.as<float>() + 2 * 16;
  for (int e = 0; e < 4; ++e) {
    EXPECT_EQ(cache[(1 * 8 + 0 * 4 + 1) * 4 + e], row0[8 + e]);   // K of token 0
    EXPECT_EQ(cache[(1 * 8 + 1 * 4 + 1) * 4 + e], row0[12 + e]);  // V of token 0
    EXPECT_EQ(cache[(0 * 8 + 0 * 4 + 0) * 4 + e], row2[8 + e]);
    EXPECT_EQ(cache[(0 * 8 + 1 * 4 + 0) * 4 + e], row2[12 + e]);
  }
  int written = 0;
  for (int64_t i = 0; i < kv.data.numel(); ++i) written += cache[i] != 0.0f;
  EXPECT_EQ(written, 16);  // token 1 (padding) stored nothing
}

// FP8 KV storage: each head's K or V vector as codes with its own scale (backend.h, KvStorage), and a block's
// codes and scales together through a host slot and back into another block.
TEST(CpuOps, Fp8KvStoresEachVectorWithItsScaleAndBlocksRoundTripThroughTheHost) {
  CpuBackend b;
  std::mt19937 rng(7);
  const AttentionShape shape{2, 2, 4};  // rows: 2 q heads, 2 k heads, 2 v heads of 4
  Tensor qkv = random_tensor(b, Shape{3, 24}, rng);
  std::fill_n(qkv.as<float>() + 2 * 24 + 8, 4, 0.0f);  // token 2's first k head: all zero (scale 1)
  const int64_t slots[3] = {5, -1, 0};                  // block 1 offset 1, padding, block 0 offset 0
  KvStorage kv{b.alloc(DType::kF8E4M3, Shape{3, 1, 2 * 4, 8}), 1, 4, b.alloc(DType::kF32, Shape{3, 1, 2 * 2, 4})};
  EXPECT_EQ(kv_block_bytes(kv), size_t{2 * 4 * 8 + 2 * 2 * 4 * 4});
  b.store_kv(kv, 0, qkv, b.upload(slots, DType::kI64, Shape{3}), shape);
  const auto* codes = static_cast<const uint8_t*>(kv.data.data);
  const float* scales = kv.scales.as<float>();
  for (const auto& [token, block, offset] : {std::tuple{0, 1, 1}, std::tuple{2, 0, 0}}) {
    for (int kvi = 0; kvi < 2; ++kvi) {
      for (int head = 0; head < 2; ++head) {
        const float* x = qkv.as<float>() + token * 24 + 8 + kvi * 8 + head * 4;
        float amax = 0;
        for (int e = 0; e < 4; ++e) amax = std::max(amax, std::fabs(x[e]));
        const float scale = scales[((block * 2 + kvi) * 2 + head) * 4 + offset];
        EXPECT_EQ(scale, fp8::kv_scale_for_amax(amax)) << token << " " << kvi << " " << head;
        for (int e = 0; e < 4; ++e) {
          EXPECT_EQ(codes[((block * 2 + kvi) * 4 + offset) * 8 + head * 4 + e], fp8::quantize(x[e], scale));
        }
      }
    }
  }
  int written = 0;
  for (int64_t i = 0; i < kv.scales.numel(); ++i) written += scales[i] != 0.0f;
  EXPECT_EQ(written, 8);  // two tokens x (K, V) x 2 heads: the padding token stored nothing

  Tensor host = b.alloc_host(DType::kU8, Shape{2, static_cast<int64_t>(kv_block_bytes(kv))});
  const BlockCopy out{BlockCopy::Direction::kToHost, 1, 1}, back{BlockCopy::Direction::kToDevice, 2, 1};
  b.copy_blocks(kv, host, std::span(&out, 1));
  b.copy_blocks(kv, host, std::span(&back, 1));
  const size_t data_bytes = 2 * 4 * 8, scale_floats = 2 * 2 * 4;
  EXPECT_EQ(std::memcmp(codes + 2 * data_bytes, codes + data_bytes, data_bytes), 0);
  EXPECT_EQ(std::memcmp(scales + 2 * scale_floats, scales + scale_floats, scale_floats * sizeof(float)), 0);
  EXPECT_TRUE(std::any_of(scales + scale_floats, scales + 2 * scale_floats, [](float x) { return x != 0.0f; }));
}

}  // namespace
}  // namespace tide
