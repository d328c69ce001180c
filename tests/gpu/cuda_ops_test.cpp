// Every CUDA op against the CPU reference op on fresh random inputs (bf16-representable, so both start from
// the same numbers). Tolerances: one bf16 rounding of the output (2^-9 relative) for data movement and
// elementwise ops; a few roundings for reductions and matmuls (f32 accumulation in both).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "core/error.h"
#include "gpu_test_util.h"

namespace tide {
namespace {

using test::both;

class CudaOps : public test::CpuAndCudaTest {
 protected:
  // RoPE's inverse frequencies 50000^(-2j / d), F32 on both backends.
  test::Pair inv_freq(int64_t d) {
    std::vector<float> f;
    for (int64_t j = 0; j < d / 2; ++j) f.push_back(static_cast<float>(std::pow(50000.0, -2.0 * j / d)));
    return {cpu_.upload(f.data(), DType::kF32, Shape{d / 2}), gpu_->upload(f.data(), DType::kF32, Shape{d / 2})};
  }

  // The fused RoPE + KV store tests' inputs: 12 q heads and 4 kv heads of 128 (GQA 3), 7 tokens at positions
  // up to 70000, their slots in shuffled blocks of 5 positions, one padding token (slot -1).
  struct RopeStoreCase {
    AttentionShape shape{12, 4, 128};
    int64_t tokens = 7, blocks = 4, layers = 2, layer = 1, block_size = 5;
    int64_t row = 0;  // qkv row: q, k and v heads
    test::Pair qkv, pos, slots, freq;
  };
  RopeStoreCase rope_store_case(uint32_t seed) {
    RopeStoreCase c;
    c.row = (c.shape.num_heads + 2 * c.shape.num_heads_kv) * c.shape.head_dim;
    c.qkv = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(c.tokens * c.row), seed),
                 Shape{c.tokens, c.row});
    c.pos = test::both_i32(cpu_, *gpu_, {0, 1, 7, 8, 4096, 70000, 3}, Shape{c.tokens});
    c.slots = test::both_i64(cpu_, *gpu_, {15, 16, 2, 3, 19, -1, 9}, Shape{c.tokens});
    c.freq = inv_freq(c.shape.head_dim);
    return c;
  }
};

TEST_F(CudaOps, EmbeddingAndGatherRowsCopyExactly) {
  const auto table = both(cpu_, *gpu_, test::random_bf16_values(50 * 96, 1), Shape{50, 96});
  const std::vector<int32_t> ids_v = {3, 49, 0, 3, 17};
  const auto ids = test::both_i32(cpu_, *gpu_, ids_v, Shape{5});
  Tensor out_c = cpu_.alloc(DType::kF32, Shape{5, 96}), out_g = gpu_->alloc(DType::kBF16, Shape{5, 96});
  cpu_.embedding(out_c, table.cpu, ids.cpu);
  gpu_->embedding(out_g, table.gpu, ids.gpu);
  EXPECT_EQ(test::to_f32(*gpu_, out_g), test::to_f32(cpu_, out_c));

  const auto rows = test::both_i32(cpu_, *gpu_, {4, 0, 2}, Shape{3});
  Tensor g_c = cpu_.alloc(DType::kF32, Shape{3, 96}), g_g = gpu_->alloc(DType::kBF16, Shape{3, 96});
  cpu_.gather_rows(g_c, out_c, rows.cpu);
  gpu_->gather_rows(g_g, out_g, rows.gpu);
  EXPECT_EQ(test::to_f32(*gpu_, g_g), test::to_f32(cpu_, g_c));
}

TEST_F(CudaOps, LayerNormInPlaceAndOutOfPlace) {
  for (int64_t hidden : {int64_t{96}, int64_t{4096}, int64_t{12288}}) {
    const auto x = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(7 * hidden), 2, 3.0f, 0.5f), Shape{7, hidden});
    const auto w = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(hidden), 3, 0.2f, 1.0f), Shape{hidden});
    Tensor out_c = cpu_.alloc(DType::kF32, Shape{7, hidden});
    cpu_.layer_norm(out_c, x.cpu, w.cpu, 1e-5f);
    Tensor out_g = gpu_->alloc(DType::kBF16, Shape{7, hidden});
    gpu_->layer_norm(out_g, x.gpu, w.gpu, 1e-5f);
    EXPECT_LT(test::rel_err(test::to_f32(*gpu_, out_g), test::to_f32(cpu_, out_c)), 2 * test::kBf16Rounding) << hidden;
    gpu_->layer_norm(x.gpu, x.gpu, w.gpu, 1e-5f);  // in place
    EXPECT_EQ(test::to_f32(*gpu_, x.gpu), test::to_f32(*gpu_, out_g)) << hidden;
  }
}

TEST_F(CudaOps, ResidualLayerNormEqualsTwoAddsThenTheNorm) {
  const int64_t t = 5, hidden = 4096 + 96;  // not a multiple of the block's threads
  const size_t n = static_cast<size_t>(t * hidden);
  const auto h = both(cpu_, *gpu_, test::random_bf16_values(n, 21, 3.0f), Shape{t, hidden});
  const auto a = both(cpu_, *gpu_, test::random_bf16_values(n, 22), Shape{t, hidden});
  const auto b = both(cpu_, *gpu_, test::random_bf16_values(n, 23), Shape{t, hidden});
  const auto w = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(hidden), 24, 0.5f, 1.0f), Shape{hidden});
  Tensor out_c = cpu_.alloc(DType::kF32, Shape{t, hidden}), out_g = gpu_->alloc(DType::kBF16, Shape{t, hidden});
  cpu_.residual_layer_norm(h.cpu, a.cpu, b.cpu, out_c, w.cpu, 1e-5f);
  gpu_->residual_layer_norm(h.gpu, a.gpu, b.gpu, out_g, w.gpu, 1e-5f);
  EXPECT_LT(test::rel_err(test::to_f32(*gpu_, h.gpu), test::to_f32(cpu_, h.cpu)), 2 * test::kBf16Rounding);
  EXPECT_LT(test::rel_err(test::to_f32(*gpu_, out_g), test::to_f32(cpu_, out_c)), 3 * test::kBf16Rounding);
}

TEST_F(CudaOps, MatmulBf16AndF32Outputs) {
  for (auto [t, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 256, 1024}, {37, 512, 768}, {256, 4096, 128}}) {
    const auto x = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(t * k), 4), Shape{t, k});
    const auto w = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(n * k), 5, 0.05f), Shape{n, k});
    Tensor c = cpu_.alloc(DType::kF32, Shape{t, n});
    cpu_.matmul(c, x.cpu, w.cpu, 0.25f);
    const std::vector<float> want = test::to_f32(cpu_, c);
    Tensor g32 = gpu_->alloc(DType::kF32, Shape{t, n});
    gpu_->matmul(g32, x.gpu, w.gpu, 0.25f);
    EXPECT_LT(test::rel_err(test::to_f32(*gpu_, g32), want), 1e-5) << t << "x" << k << "x" << n;
    Tensor g16 = gpu_->alloc(DType::kBF16, Shape{t, n});
    gpu_->matmul(g16, x.gpu, w.gpu, 0.25f);
    EXPECT_LT(test::rel_err(test::to_f32(*gpu_, g16), want), test::kBf16Rounding) << t << "x" << k << "x" << n;
  }
}

// tide's small-batch bf16 kernel (fp8_small_matmul.cu's register-fed kernel, turned on here for every matmul)
// on every element: small integers, so every product and sum is exact in f32 whatever the order, and any
// difference from the CPU is a wrong row, token or step of K. Token counts at the kernel's 8-token tiles' edges
// and past one CTA's 16 (17 and 40: token groups), K with a last 64-byte step only partly inside K (K = 40: 80
// bytes), N not a multiple of the CTAs' rows; then K = 12 (not a multiple of 8: cuBLASLt's) through the same
// dispatch.
TEST_F(CudaOps, SmallBatchBf16MatmulEveryElement) {
  gpu_->set_bf16_small_matmul_max_tokens(cuda::kBf16SmallMatmulMaxTokens);
  std::mt19937 rng(7);
  auto integers = [&](int64_t count) {
    std::vector<float> v(static_cast<size_t>(count));
    for (float& f : v) f = static_cast<float>(static_cast<int>(rng() % 9) - 4);
    return v;
  };
  struct Case { int64_t t, k, n; };
  std::vector<Case> cases;
  for (const int64_t t : {1, 2, 7, 8, 9, 15, 16}) cases.push_back({t, 1032, 200});
  cases.push_back({3, 40, 1000});
  cases.push_back({16, 8, 33});
  cases.push_back({5, 4096, 6144});
  cases.push_back({4, 12, 64});
  cases.push_back({17, 1032, 200});
  cases.push_back({40, 264, 72});
  for (const Case& c : cases) {
    const auto x = both(cpu_, *gpu_, integers(c.t * c.k), Shape{c.t, c.k});
    const auto w = both(cpu_, *gpu_, integers(c.n * c.k), Shape{c.n, c.k});
    Tensor oc = cpu_.alloc(DType::kF32, Shape{c.t, c.n});
    cpu_.matmul(oc, x.cpu, w.cpu, 0.25f);
    const std::vector<float> want = test::to_f32(cpu_, oc);
    for (const DType out : {DType::kF32, DType::kBF16}) {
      for (int run = 0; run < 2; ++run) {
        Tensor og = gpu_->alloc(out, Shape{c.t, c.n});
        gpu_->matmul(og, x.gpu, w.gpu, 0.25f);
        const std::vector<float> got = test::to_f32(*gpu_, og);
        int64_t wrong = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          const float expect = out == DType::kF32 ? want[i] : bf16_to_f32(f32_to_bf16(want[i]));
          if (got[i] != expect && wrong++ < 3) {
            ADD_FAILURE() << "T=" << c.t << " K=" << c.k << " N=" << c.n << " " << dtype_name(out) << ": token "
                          << static_cast<int64_t>(i) / c.n << " row " << static_cast<int64_t>(i) % c.n << " got "
                          << got[i] << " want " << expect;
          }
        }
        EXPECT_EQ(wrong, 0) << "T=" << c.t << " K=" << c.k << " N=" << c.n << " " << dtype_name(out);
      }
    }
  }
  gpu_->set_bf16_small_matmul_max_tokens(-1);
}

// The same kernel's rounding on random values: within a few f32 roundings of the CPU's f32 sums, like cuBLASLt
// (MatmulBf16AndF32Outputs), and as close to cuBLASLt's result.
TEST_F(CudaOps, SmallBatchBf16MatmulMatchesCublas) {
  for (const int64_t t : {1, 4, 16}) {
    const int64_t k = 4096, n = 1536;
    const auto x = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(t * k), 21), Shape{t, k});
    const auto w = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(n * k), 22, 0.05f), Shape{n, k});
    Tensor oc = cpu_.alloc(DType::kF32, Shape{t, n});
    cpu_.matmul(oc, x.cpu, w.cpu, 1.0f);
    const std::vector<float> want = test::to_f32(cpu_, oc);
    Tensor tide_out = gpu_->alloc(DType::kF32, Shape{t, n}), cublas_out = gpu_->alloc(DType::kF32, Shape{t, n});
    gpu_->set_bf16_small_matmul_max_tokens(cuda::kBf16SmallMatmulMaxTokens);
    gpu_->matmul(tide_out, x.gpu, w.gpu, 1.0f);
    gpu_->set_bf16_small_matmul_max_tokens(0);
    gpu_->matmul(cublas_out, x.gpu, w.gpu, 1.0f);
    gpu_->set_bf16_small_matmul_max_tokens(-1);
    const std::vector<float> tide_got = test::to_f32(*gpu_, tide_out), cublas_got = test::to_f32(*gpu_, cublas_out);
    EXPECT_LT(test::rel_err(tide_got, want), 1e-5) << "T=" << t;
    EXPECT_LT(test::rel_err(cublas_got, want), 1e-5) << "T=" << t;
    EXPECT_LT(test::rel_err(tide_got, cublas_got), 1e-5) << "T=" << t;
  }
}

// The engine's dispatch (cuda::bf16_small_matmul_preferred) on a small matrix: a token's row of out is the
// same bits whether the token is alone or one of many (a decode step's one token against a verify step's
// several, or a short prefill's), on random values where the order of the sums shows. Larger matrices go to
// cuBLASLt above 16 tokens, or at any count.
TEST_F(CudaOps, SmallBatchBf16MatmulRowsDoNotDependOnTheBatch) {
  const int64_t k = 256, n = 768;
  ASSERT_TRUE(cuda::bf16_small_matmul_preferred(40, k, n));
  ASSERT_FALSE(cuda::bf16_small_matmul_preferred(cuda::kBf16SmallMatmulAnyTokensMax + 1, k, n));
  ASSERT_TRUE(cuda::bf16_small_matmul_preferred(16, 2048, 2048));
  ASSERT_FALSE(cuda::bf16_small_matmul_preferred(17, 2048, 2048));
  ASSERT_FALSE(cuda::bf16_small_matmul_preferred(1, 4096, 6144));
  const std::vector<float> xs = test::random_bf16_values(static_cast<size_t>(40 * k), 31);
  const Tensor w = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(n * k), 32, 0.05f), Shape{n, k}).gpu;
  auto rows = [&](int64_t first, int64_t count) {
    const std::vector<float> part(xs.begin() + first * k, xs.begin() + (first + count) * k);
    const Tensor x = both(cpu_, *gpu_, part, Shape{count, k}).gpu;
    Tensor out = gpu_->alloc(DType::kF32, Shape{count, n});
    gpu_->matmul(out, x, w, 1.0f);
    return test::to_f32(*gpu_, out);
  };
  for (const int64_t t : {2, 5, 9, 16, 40}) {
    const std::vector<float> together = rows(0, t);
    for (int64_t token = 0; token < t; ++token) {
      const std::vector<float> alone = rows(token, 1);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), together.begin() + token * n))
          << "token " << token << " of " << t;
    }
  }
}

TEST_F(CudaOps, RopeRotatesTheSamePairs) {
  const int64_t d = 128, heads = 12, rope_heads = 10, tokens = 9;
  const auto qkv = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(tokens * heads * d), 6), Shape{tokens, heads * d});
  const auto pos = test::both_i32(cpu_, *gpu_, {0, 1, 2, 15, 16, 4095, 4096, 70000, 131071}, Shape{tokens});
  const test::Pair freq = inv_freq(d);
  cpu_.rope(qkv.cpu, pos.cpu, freq.cpu, rope_heads);
  gpu_->rope(qkv.gpu, pos.gpu, freq.gpu, rope_heads);
  const auto got = test::to_f32(*gpu_, qkv.gpu), want = test::to_f32(cpu_, qkv.cpu);
  EXPECT_LT(test::rel_err(got, want), 2 * test::kBf16Rounding);
  // The heads past num_rope_heads are untouched, bit for bit.
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = rope_heads * d; i < heads * d; ++i) ASSERT_EQ(got[t * heads * d + i], want[t * heads * d + i]);
}

TEST_F(CudaOps, FusedRopeAndKvStoreEqualsRopeThenStore) {
  const RopeStoreCase c = rope_store_case(11);
  const AttentionShape& shape = c.shape;
  const int64_t kv_size = shape.num_heads_kv * shape.head_dim;
  const std::vector<float> sentinel(static_cast<size_t>(c.blocks * c.layers * 2 * c.block_size * kv_size), 1000.0f);
  const Shape cache_shape{c.blocks, c.layers, 2 * c.block_size, kv_size};
  KvStorage kv_c{cpu_.upload(sentinel.data(), DType::kF32, cache_shape), c.layers, c.block_size};
  KvStorage kv_g{gpu_->upload_as(sentinel.data(), DType::kF32, cache_shape, DType::kBF16), c.layers, c.block_size};

  cpu_.rope(c.qkv.cpu, c.pos.cpu, c.freq.cpu, shape.num_heads + shape.num_heads_kv);  // the definition
  cpu_.store_kv(kv_c, c.layer, c.qkv.cpu, c.slots.cpu, shape);
  gpu_->rope_store_kv(kv_g, c.layer, c.qkv.gpu, c.pos.gpu, c.freq.gpu, c.slots.gpu, shape);

  EXPECT_LT(test::rel_err(test::to_f32(*gpu_, c.qkv.gpu), test::to_f32(cpu_, c.qkv.cpu)), 2 * test::kBf16Rounding);
  const std::vector<float> got = test::to_f32(*gpu_, kv_g.data), want = test::to_f32(cpu_, kv_c.data);
  EXPECT_LT(test::rel_err(got, want), 2 * test::kBf16Rounding);
  // Slots nobody wrote (the padding token's included) still hold the sentinel, bit for bit.
  size_t untouched = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == 1000.0f) {
      ASSERT_EQ(got[i], 1000.0f) << i;
      ++untouched;
    }
  }
  EXPECT_EQ(untouched, want.size() - static_cast<size_t>(6 * 2 * kv_size));
}

TEST_F(CudaOps, FusedRopeAndFp8KvStoreQuantizesTheRotatedRows) {
  // As above with an FP8 cache: the stored codes and scales are the CPU's quantization of the rows the kernel
  // rotated, bit for bit; the padding token's slot and every slot nobody wrote stay zero.
  const RopeStoreCase c = rope_store_case(12);
  const AttentionShape& shape = c.shape;
  KvStorage kv_c = test::make_kv(cpu_, true, c.blocks, c.layers, c.block_size, shape);
  KvStorage kv_g = test::make_kv(*gpu_, true, c.blocks, c.layers, c.block_size, shape);
  const std::vector<uint8_t> empty = test::kv_bytes(*gpu_, kv_g);

  gpu_->rope_store_kv(kv_g, c.layer, c.qkv.gpu, c.pos.gpu, c.freq.gpu, c.slots.gpu, shape);
  const std::vector<float> rotated = test::to_f32(*gpu_, c.qkv.gpu);
  cpu_.rope(c.qkv.cpu, c.pos.cpu, c.freq.cpu, shape.num_heads + shape.num_heads_kv);
  EXPECT_LT(test::rel_err(rotated, test::to_f32(cpu_, c.qkv.cpu)), 2 * test::kBf16Rounding);
  const Tensor rotated_c = cpu_.upload(rotated.data(), DType::kF32, Shape{c.tokens, c.row});
  cpu_.store_kv(kv_c, c.layer, rotated_c, c.slots.cpu, shape);
  const std::vector<uint8_t> got = test::kv_bytes(*gpu_, kv_g), want = test::kv_bytes(cpu_, kv_c);
  EXPECT_EQ(got, want);
  EXPECT_EQ(std::count(empty.begin(), empty.end(), uint8_t{0}), static_cast<std::ptrdiff_t>(empty.size()));
  EXPECT_NE(got, empty);
}

// The fused RoPE + KV store and the KV store alone give the same bits on every path: rows 4 bytes off a 16-byte
// boundary (one pair per thread, scalar copies) against the same rows aligned (16-byte chunks), for both cache
// dtypes; Backend::rope alone rotates to the same bits. The rotation is written out with its rounding, so no
// path may round it otherwise.
TEST_F(CudaOps, RopeAndKvStoreGiveTheSameBitsOnEveryPath) {
  const RopeStoreCase c = rope_store_case(13);
  const AttentionShape& shape = c.shape;
  const std::vector<float> values = test::to_f32(*gpu_, c.qkv.gpu);
  std::vector<float> shifted(values.size() + 8, 0.0f);
  std::copy(values.begin(), values.end(), shifted.begin() + 2);
  for (const bool fp8 : {false, true}) {
    for (const bool rope : {true, false}) {
      const std::string what = std::string(fp8 ? "FP8" : "bf16") + (rope ? " cache, RoPE + store" : " cache, store");
      const Tensor aligned = gpu_->upload_as(values.data(), DType::kF32, Shape{c.tokens, c.row}, DType::kBF16);
      const Tensor buffer =
          gpu_->upload_as(shifted.data(), DType::kF32, Shape{static_cast<int64_t>(shifted.size())}, DType::kBF16);
      Tensor off = buffer;  // the same rows from element 2 of the buffer: 4-byte aligned, not 16
      off.data = static_cast<char*>(buffer.data) + 2 * dtype_size(DType::kBF16);
      off.shape = Shape{c.tokens, c.row};
      ASSERT_NE(reinterpret_cast<uintptr_t>(off.data) % 16, 0u);
      KvStorage kv_aligned = test::make_kv(*gpu_, fp8, c.blocks, c.layers, c.block_size, shape);
      KvStorage kv_off = test::make_kv(*gpu_, fp8, c.blocks, c.layers, c.block_size, shape);
      const std::vector<uint8_t> empty = test::kv_bytes(*gpu_, kv_aligned);
      if (rope) {
        gpu_->rope_store_kv(kv_aligned, c.layer, aligned, c.pos.gpu, c.freq.gpu, c.slots.gpu, shape);
        gpu_->rope_store_kv(kv_off, c.layer, off, c.pos.gpu, c.freq.gpu, c.slots.gpu, shape);
      } else {
        gpu_->store_kv(kv_aligned, c.layer, aligned, c.slots.gpu, shape);
        gpu_->store_kv(kv_off, c.layer, off, c.slots.gpu, shape);
      }
      const std::vector<float> rows = test::to_f32(*gpu_, aligned);
      EXPECT_EQ(rows, test::to_f32(*gpu_, off)) << what;
      if (rope && !fp8) {  // Backend::rope alone rotates the q and k heads to the same bits (no cache involved)
        const Tensor alone = gpu_->upload_as(values.data(), DType::kF32, Shape{c.tokens, c.row}, DType::kBF16);
        gpu_->rope(alone, c.pos.gpu, c.freq.gpu, shape.num_heads + shape.num_heads_kv);
        EXPECT_EQ(rows, test::to_f32(*gpu_, alone)) << what << ", Backend::rope";
      }
      EXPECT_EQ(rows != values, rope) << what << ": RoPE rotates the rows in place, the store leaves them";
      const std::vector<uint8_t> stored = test::kv_bytes(*gpu_, kv_aligned);
      EXPECT_EQ(stored, test::kv_bytes(*gpu_, kv_off)) << what;
      EXPECT_NE(stored, empty) << what;
    }
  }
}

// SwiGLU on rows of 16-byte chunks (R7B's MLP; 70000 rows of 8, past the 65535 rows one launch's grid spans)
// and of single elements (rows of 300 and 1001 elements); then add.
TEST_F(CudaOps, SiluMulAndAdd) {
  for (const auto& [tokens, inter] : {std::pair<int64_t, int64_t>{6, 300}, {3, 1001}, {9, 14336}, {70000, 8}}) {
    const auto gu = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(tokens * 2 * inter), 7, 2.0f),
                         Shape{tokens, 2 * inter});
    Tensor c = cpu_.alloc(DType::kF32, Shape{tokens, inter}), g = gpu_->alloc(DType::kBF16, Shape{tokens, inter});
    cpu_.silu_mul(c, gu.cpu);
    gpu_->silu_mul(g, gu.gpu);
    EXPECT_LT(test::rel_err(test::to_f32(*gpu_, g), test::to_f32(cpu_, c)), 2 * test::kBf16Rounding)
        << tokens << " x " << inter;
  }
  const auto a = both(cpu_, *gpu_, test::random_bf16_values(1000, 8), Shape{1000});
  const auto b = both(cpu_, *gpu_, test::random_bf16_values(1000, 9), Shape{1000});
  Tensor sc = cpu_.alloc(DType::kF32, Shape{1000});
  cpu_.add(sc, a.cpu, b.cpu);
  gpu_->add(a.gpu, a.gpu, b.gpu);  // in place
  EXPECT_LT(test::rel_err(test::to_f32(*gpu_, a.gpu), test::to_f32(cpu_, sc)), test::kBf16Rounding);
}

TEST_F(CudaOps, CopyIsByteForByteForEveryDtype) {
  std::vector<float> values = test::random_bf16_values(3 * 1001, 10);
  values[5] = -0.0f;
  const Tensor f32 = gpu_->upload(values.data(), DType::kF32, Shape{3, 1001});
  Tensor f32_copy = gpu_->alloc(DType::kF32, Shape{3, 1001});
  gpu_->copy(f32_copy, f32);
  std::vector<float> back(values.size());
  gpu_->download(f32_copy, back.data());
  EXPECT_EQ(std::memcmp(back.data(), values.data(), values.size() * sizeof(float)), 0);
  const std::vector<int32_t> ids = {7, -1, 1 << 30};
  const Tensor i32 = gpu_->upload(ids.data(), DType::kI32, Shape{3});
  Tensor i32_copy = gpu_->alloc(DType::kI32, Shape{3});
  gpu_->copy(i32_copy, i32);
  std::vector<int32_t> ids_back(3);
  gpu_->download(i32_copy, ids_back.data());
  EXPECT_EQ(ids_back, ids);
  EXPECT_THROW(gpu_->copy(gpu_->alloc(DType::kBF16, Shape{3, 1001}), f32), Error);
}

// The side stream (Backend::side_begin): its ops start after what the main stream was given before (z reads
// y written just before the fork: 8 MB, long enough to still run if the side did not wait), the main stream
// sees its results after side_join, and allocating on it is refused.
TEST_F(CudaOps, SideStreamStartsAfterTheForkAndJoinsBack) {
  const int64_t n = int64_t{1} << 22;
  const std::vector<float> values = test::random_bf16_values(static_cast<size_t>(n), 12);
  const Tensor x = gpu_->upload_as(values.data(), DType::kF32, Shape{n}, DType::kBF16);
  Tensor y = gpu_->alloc(DType::kBF16, Shape{n}), z = gpu_->alloc(DType::kBF16, Shape{n});
  Tensor want = gpu_->alloc(DType::kBF16, Shape{n});
  gpu_->add(y, x, x);  // main: y = 2x
  gpu_->side_begin();
  gpu_->add(z, y, x);  // side: z = 2x + x
  EXPECT_THROW(gpu_->alloc(DType::kF32, Shape{4}), Error);
  gpu_->side_end();
  gpu_->side_join();
  gpu_->add(want, y, x);
  EXPECT_EQ(test::to_f32(*gpu_, z), test::to_f32(*gpu_, want));
}

TEST_F(CudaOps, CopyBlocksRoundTripsThroughPinnedHostMemory) {
  const int64_t blocks = 6, layers = 2, block_size = 4, kv_size = 64;
  const std::vector<float> values = test::random_bf16_values(static_cast<size_t>(blocks * layers * 2 * block_size * kv_size), 10);
  KvStorage kv{gpu_->upload_as(values.data(), DType::kF32, Shape{blocks, layers, 2 * block_size, kv_size}, DType::kBF16),
               layers, block_size};
  const int64_t block_bytes = layers * 2 * block_size * kv_size * 2;
  Tensor host = gpu_->alloc_host(DType::kU8, Shape{3, block_bytes});
  std::vector<BlockCopy> out = {{BlockCopy::Direction::kToHost, 1, 0}, {BlockCopy::Direction::kToHost, 4, 2}};
  gpu_->copy_blocks(kv, host, out);
  std::vector<BlockCopy> back = {{BlockCopy::Direction::kToDevice, 5, 0}, {BlockCopy::Direction::kToDevice, 0, 2}};
  gpu_->copy_blocks(kv, host, back);
  const std::vector<float> got = test::to_f32(*gpu_, kv.data);
  const size_t per_block = static_cast<size_t>(layers * 2 * block_size * kv_size);
  auto block = [&](const std::vector<float>& v, size_t b) { return std::vector<float>(v.begin() + b * per_block, v.begin() + (b + 1) * per_block); };
  EXPECT_EQ(block(got, 5), block(values, 1));
  EXPECT_EQ(block(got, 0), block(values, 4));
  EXPECT_EQ(block(got, 2), block(values, 2));
}

TEST_F(CudaOps, CopyBlocksMovesFp8CodesAndScales) {
  // An FP8 cache: a host slot holds its block's codes, then the block's scales (kv_block_parts); a copy back
  // restores both parts, and no other block changes.
  const AttentionShape shape{4, 2, 64};
  const int64_t blocks = 6, layers = 2, block_size = 4;
  KvStorage kv = test::make_kv(*gpu_, true, blocks, layers, block_size, shape);
  std::vector<uint8_t> codes(kv.data.nbytes());
  std::vector<float> scales(static_cast<size_t>(kv.scales.numel()));
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * 37 + 11) % 251);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = 0.5f + static_cast<float>(i);
  gpu_->upload_into(kv.data, codes.data());
  gpu_->upload_into(kv.scales, scales.data());
  const std::vector<uint8_t> before = test::kv_bytes(*gpu_, kv);
  const size_t code_bytes = kv.data.nbytes() / blocks, scale_bytes = kv.scales.nbytes() / blocks;
  ASSERT_EQ(kv_block_bytes(kv), code_bytes + scale_bytes);
  // Block b as a host slot holds it: its codes, then its scales (kv_bytes lays out all codes, then all scales).
  auto slot_of = [&](const std::vector<uint8_t>& storage, size_t b) {
    std::vector<uint8_t> slot(storage.begin() + b * code_bytes, storage.begin() + (b + 1) * code_bytes);
    const auto scales_at = storage.begin() + kv.data.nbytes() + b * scale_bytes;
    slot.insert(slot.end(), scales_at, scales_at + scale_bytes);
    return slot;
  };

  Tensor host = gpu_->alloc_host(DType::kU8, Shape{3, static_cast<int64_t>(kv_block_bytes(kv))});
  const std::vector<BlockCopy> out = {{BlockCopy::Direction::kToHost, 1, 0}, {BlockCopy::Direction::kToHost, 4, 2}};
  gpu_->copy_blocks(kv, host, out);
  EXPECT_EQ(test::kv_bytes(*gpu_, kv), before);  // copies out change nothing (and the download synchronizes)
  const auto* h = static_cast<const uint8_t*>(host.data);
  EXPECT_EQ(std::vector<uint8_t>(h, h + kv_block_bytes(kv)), slot_of(before, 1));
  const std::vector<BlockCopy> back = {{BlockCopy::Direction::kToDevice, 5, 0},
                                       {BlockCopy::Direction::kToDevice, 0, 2}};
  gpu_->copy_blocks(kv, host, back);
  const std::vector<uint8_t> after = test::kv_bytes(*gpu_, kv);
  EXPECT_EQ(slot_of(after, 5), slot_of(before, 1));
  EXPECT_EQ(slot_of(after, 0), slot_of(before, 4));
  for (size_t b : {size_t{1}, size_t{2}, size_t{3}, size_t{4}}) EXPECT_EQ(slot_of(after, b), slot_of(before, b)) << b;
}

}  // namespace
}  // namespace tide
