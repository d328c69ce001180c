// The CUDA backend's FP8 path against the CPU reference: per-token quantization bit for bit (both use
// core/fp8.h's arithmetic); the FP8 matmul with per-row and per-token scales (tide's small-batch kernel for
// T <= 16 and cuBLASLt) within bf16 output rounding; the fused kernels (norm, residual + norm, SwiGLU with
// FP8 output) bit for bit against the GPU's unfused ops and within e4m3 rounding of the CPU's; and the
// fixture models quantized to FP8 at load: logits within the bound the CPU FP8 test justifies (16 x
// transformers' bf16 error) plus the bf16 activations' own error (2 x).
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../test_util.h"
#include "core/error.h"
#include "core/fp8.h"
#include "gpu_test_util.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::both;
using test::fixture;

class CudaFp8 : public test::CpuAndCudaTest {};

// 9 rows, and 600 (prefill sizes: narrower blocks, row_tile.cuh's kManyRows), of lengths on each tile shape.
TEST_F(CudaFp8, QuantizeMatchesTheCpuBitForBit) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{9, 96}, {9, 4096}, {9, 12288}, {600, 96}, {600, 4096},
                                   {600, 8000}, {600, 12288}, {600, 20000}}) {
    std::vector<float> x = test::random_bf16_values(static_cast<size_t>(rows * cols), 11, 3.0f);
    for (int64_t i = 0; i < cols; ++i) x[static_cast<size_t>(cols + i)] *= 2048.0f;  // a wide row (a power of two: bf16-exact)
    for (int64_t i = 0; i < cols; ++i) x[static_cast<size_t>(2 * cols + i)] = 0.0f;  // an all-zero row
    const auto xt = both(cpu_, *gpu_, x, Shape{rows, cols});
    Tensor qc = cpu_.alloc(DType::kF8E4M3, Shape{rows, cols}), sc = cpu_.alloc(DType::kF32, Shape{rows});
    Tensor qg = gpu_->alloc(DType::kF8E4M3, Shape{rows, cols}), sg = gpu_->alloc(DType::kF32, Shape{rows});
    cpu_.quantize_fp8(qc, sc, xt.cpu);
    gpu_->quantize_fp8(qg, sg, xt.gpu);
    std::vector<uint8_t> codes(static_cast<size_t>(rows * cols));
    std::vector<float> scales(static_cast<size_t>(rows));
    gpu_->download(qg, codes.data());
    gpu_->download(sg, scales.data());
    EXPECT_EQ(scales, std::vector<float>(sc.as<float>(), sc.as<float>() + rows)) << rows << " x " << cols;
    EXPECT_EQ(codes, std::vector<uint8_t>(qc.as<uint8_t>(), qc.as<uint8_t>() + rows * cols)) << rows << " x " << cols;
  }
}

// Random e4m3 codes (no NaN).
std::vector<uint8_t> random_codes(std::mt19937& rng, int64_t n) {
  std::vector<uint8_t> c(static_cast<size_t>(n));
  for (uint8_t& v : c) {
    v = static_cast<uint8_t>(rng() % 256);
    if ((v & 0x7F) == 0x7F) v = 0x38;
  }
  return c;
}

// Codes of the integers -3 .. 3: their products and the sums of a test's K of them are exact in f32, and those
// of 128 of them (|sum| < 2^11) in Hopper's FP8 tensor-core accumulation, so a kernel's result is exact
// whatever order it adds in.
std::vector<uint8_t> small_integer_codes(std::mt19937& rng, int64_t n) {
  std::vector<uint8_t> c(static_cast<size_t>(n));
  for (uint8_t& v : c) v = fp8::e4m3_from_float(static_cast<float>(static_cast<int>(rng() % 7) - 3));
  return c;
}

TEST_F(CudaFp8, MatmulMatchesTheCpuWithinBf16Rounding) {
  struct Case {
    int64_t t, k, n;
    DType out;
  };
  // T <= 16 runs the small-batch kernel (1 and 2 token tiles; N past 2 x 32 x SMs takes 32-row CTAs; N not a
  // multiple of 16; K not a multiple of 64), T <= 256 the wgmma kernel (each of its token widths; K not a
  // multiple of its 128-byte stages), and each of them, forced, cuBLASLt; larger T always cuBLASLt.
  const Case cases[] = {{1, 4096, 1024, DType::kBF16},  {7, 512, 256, DType::kBF16},   {8, 4112, 1000, DType::kF32},
                        {9, 1024, 777, DType::kBF16},   {16, 2048, 9000, DType::kBF16}, {3, 16, 40, DType::kF32},
                        {1, 14336, 4096, DType::kF32},  {64, 4096, 3072, DType::kBF16}, {17, 4096, 6144, DType::kBF16},
                        {100, 1040, 777, DType::kF32},  {129, 2064, 1024, DType::kBF16}, {256, 14336, 512, DType::kF32},
                        {300, 1024, 512, DType::kBF16}};
  for (const Case& s : cases) {
    std::mt19937 rng(static_cast<uint32_t>(s.t * 131 + s.k + s.n));
    const std::vector<uint8_t> x8 = random_codes(rng, s.t * s.k), w8 = random_codes(rng, s.n * s.k);
    std::vector<float> xs(static_cast<size_t>(s.t)), ws(static_cast<size_t>(s.n));
    for (float& v : xs) v = 0.01f * static_cast<float>(1 + rng() % 100);
    for (float& v : ws) v = 0.001f * static_cast<float>(1 + rng() % 100);
    auto upload = [&](Backend& b) {
      return std::array<Tensor, 4>{b.upload(x8.data(), DType::kF8E4M3, Shape{s.t, s.k}),
                                   b.upload(xs.data(), DType::kF32, Shape{s.t}),
                                   b.upload(w8.data(), DType::kF8E4M3, Shape{s.n, s.k}),
                                   b.upload(ws.data(), DType::kF32, Shape{s.n})};
    };
    const auto c = upload(cpu_);
    const auto g = upload(*gpu_);
    Tensor oc = cpu_.alloc(DType::kF32, Shape{s.t, s.n});
    cpu_.matmul_fp8(oc, c[0], c[1], c[2], c[3], 0.5f);
    const std::vector<float> want = test::to_f32(cpu_, oc);
    // tide's kernel, cuBLASLt (the engine's fast accumulation), cuBLASLt with partial sums promoted to f32
    for (int variant = 0; variant < 3; ++variant) {
      const bool tide_kernel = variant == 0, fast_accum = variant != 2;
      if (tide_kernel && s.t > 256) continue;  // past tide's kernels: the cuBLASLt variants below
      const bool cublas = !tide_kernel;
      if (cublas && s.n % 16 != 0) continue;  // cuBLASLt's FP8 matmuls need N a multiple of 16
      gpu_->set_fp8_small_matmul_max_tokens(tide_kernel ? 16 : 0);
      gpu_->set_fp8_wgmma_matmul_max_tokens(tide_kernel ? cuda::kFp8WgmmaMatmulMaxTokens : 0);
      gpu_->set_fp8_fast_accum(fast_accum);
      Tensor og = gpu_->alloc(s.out, Shape{s.t, s.n});
      gpu_->matmul_fp8(og, g[0], g[1], g[2], g[3], 0.5f);
      gpu_->set_fp8_fast_accum(true);
      const double err = test::rel_err(test::to_f32(*gpu_, og), want);
      const char* path = !cublas    ? (s.t <= 16 ? "small-batch kernel" : "wgmma kernel")
                         : fast_accum ? "cuBLASLt"
                                      : "cuBLASLt, sums promoted to f32";
      std::printf("[ fp8      ] matmul T=%ld K=%ld N=%ld %s %s: rel err %.3g against the CPU\n", static_cast<long>(s.t),
                  static_cast<long>(s.k), static_cast<long>(s.n), std::string(dtype_name(s.out)).c_str(), path, err);
      // bf16 output: its rounding. f32 output: the summation order, and for cuBLASLt and the wgmma kernel the
      // reduced precision of Hopper's FP8 tensor-core accumulation: 2e-4 seen where partial sums go to f32 every
      // stage (the wgmma kernel, cuBLASLt's promoted sums), 2.1e-3 with cuBLASLt's fast accumulation over all of
      // K = 14336; the small-batch kernels add each 64-wide product in f32.
      const double bound = s.out == DType::kBF16        ? 2 * test::kBf16Rounding
                           : cublas && fast_accum        ? 4e-3
                           : s.t > 16 || cublas          ? 1e-3
                                                         : 1e-5;
      EXPECT_LT(err, bound) << path << " T=" << s.t << " N=" << s.n;
    }
  }
}

// One FP8 matmul on random codes (or small integers: small_integer_codes) with its reference, checked on every
// output element: exact products summed in double; bound: 1e-6 of the sum of the terms' magnitudes (the terms
// cancel), f32 rounding of a sum of that many terms.
struct EveryElementCase {
  int64_t t, k, n;
  std::vector<uint8_t> x8, w8;
  std::vector<double> want, magnitudes;

  EveryElementCase(int64_t t_, int64_t k_, int64_t n_, bool small_integers = false) : t(t_), k(k_), n(n_) {
    std::mt19937 rng(static_cast<uint32_t>(t * 1000003 + n));
    const auto codes = small_integers ? small_integer_codes : random_codes;
    x8 = codes(rng, t * k);
    w8 = codes(rng, n * k);
    std::vector<double> xf(x8.size()), wf(w8.size());
    for (size_t i = 0; i < x8.size(); ++i) xf[i] = fp8::e4m3_to_float(x8[i]);
    for (size_t i = 0; i < w8.size(); ++i) wf[i] = fp8::e4m3_to_float(w8[i]);
    for (int64_t i = 0; i < t; ++i) {
      for (int64_t r = 0; r < n; ++r) {
        double sum = 0, magnitude = 0;
        for (int64_t j = 0; j < k; ++j) {
          const double p = xf[static_cast<size_t>(i * k + j)] * wf[static_cast<size_t>(r * k + j)];
          sum += p;
          magnitude += std::fabs(p);
        }
        want.push_back(0.25 * 0.5 * sum);
        magnitudes.push_back(0.125 * magnitude);
      }
    }
  }

  // The operands on the device and the output tensor; run() launches the product on the backend's stream.
  struct Operands {
    Tensor x8, x_scales, w8, w_scales, out;
  };
  Operands upload(CudaBackend& gpu) const {
    const std::vector<float> xs(static_cast<size_t>(t), 0.25f), ws(static_cast<size_t>(n), 0.5f);
    return {gpu.upload(x8.data(), DType::kF8E4M3, Shape{t, k}), gpu.upload(xs.data(), DType::kF32, Shape{t}),
            gpu.upload(w8.data(), DType::kF8E4M3, Shape{n, k}), gpu.upload(ws.data(), DType::kF32, Shape{n}),
            gpu.alloc(DType::kF32, Shape{t, n})};
  }
  static void run(CudaBackend& gpu, Operands& o) { gpu.matmul_fp8(o.out, o.x8, o.x_scales, o.w8, o.w_scales, 1.0f); }

  void check(CudaBackend& gpu, const std::string& what) const {
    Operands o = upload(gpu);
    run(gpu, o);
    expect(gpu, o.out, what);
  }

  void expect(CudaBackend& gpu, const Tensor& og, const std::string& what) const {
    const std::vector<float> got = test::to_f32(gpu, og);
    for (size_t e = 0; e < want.size(); ++e) {
      ASSERT_NEAR(got[e], want[e], 1e-6 * magnitudes[e] + 1e-30)
          << what << " T=" << t << " K=" << k << " N=" << n << " token " << static_cast<int64_t>(e) / n << " row "
          << static_cast<int64_t>(e) % n;
    }
  }
};

// Every output element, not just the L2 error: a wrong row or token in the small-batch kernel's tiling would
// hide in an aggregate over a large matrix. Every kernel shape (variant) the dispatch can pick, and the picks
// themselves (-1, -2).
TEST_F(CudaFp8, SmallBatchMatmulEveryElement) {
  const int num_variants = gpu_->set_fp8_small_matmul_variant(-1);
  for (int64_t t = 1; t <= 16; ++t) {
    const EveryElementCase c(t, 1040, 50);  // K: 16 full 64-byte steps and a 16-byte tail
    for (int variant = -2; variant < num_variants; ++variant) {
      gpu_->set_fp8_small_matmul_variant(variant);
      c.check(*gpu_, "variant " + std::to_string(variant));
    }
  }
  gpu_->set_fp8_small_matmul_variant(-1);
}

// Shapes whose work the shared-memory streaming kernel (fp8_stream_matmul.cu) splits unevenly over its CTAs:
// row tiles one CTA covers whole, tiles split between two or three CTAs (summed by the last to arrive), grids
// of whole tiles (stream_k_grid: N 4000 and 4004 on 2 CTAs per SM), and 1024-byte K chunks with a short tail:
// K a multiple of 16 only (bulk copies of rows), and of 64 (tensor-map copies, whose boxes reach past the last
// row and the last step). Each twice, so split tiles also meet counters a kernel left at zero.
TEST_F(CudaFp8, SmallBatchMatmulSplitTilesEveryElement) {
  const int num_variants = gpu_->set_fp8_small_matmul_variant(-1);
  // Hopper's driver encodes tensor maps: the tensor-map variants below must not fall back to row copies.
  EXPECT_STRNE(CudaBackend::fp8_tensor_map_feed(), "none");
  std::printf("[ fp8      ] streaming matmul's tensor-map copies: %s\n", CudaBackend::fp8_tensor_map_feed());
  for (const int64_t t : {1, 9, 16}) {
    for (const EveryElementCase& c : {EveryElementCase(t, 1040, 4000), EveryElementCase(t, 3088, 1000),
                                      EveryElementCase(t, 1088, 4004), EveryElementCase(t, 3136, 1000),
                                      EveryElementCase(t, 1040, 4600)}) {
      for (int variant = -1; variant < num_variants; ++variant) {
        gpu_->set_fp8_small_matmul_variant(variant);
        for (int run = 0; run < 2; ++run) c.check(*gpu_, "variant " + std::to_string(variant));
      }
    }
  }
  gpu_->set_fp8_small_matmul_variant(-1);
}

// The dispatch streams every matrix at 1-16 tokens on one kernel whose sums for a token run in the same order
// whatever the other tokens (the same stream-K split, the same steps): a token's outputs are the same bits at
// every batch size up to 16, so a decode row does not depend on how many sequences share the step, and a
// speculative verify row of up to 16 tokens is the decode row. R7B's qkv shape (K 4096, N 6144: whole tiles on
// one CTA per SM) and down's (K 14336, N 4096: split tiles).
TEST_F(CudaFp8, SmallBatchDispatchGivesATokenTheSameBitsAtEveryBatchSize) {
  gpu_->set_fp8_small_matmul_variant(-1);
  for (const auto& [k, n] : {std::pair<int64_t, int64_t>{4096, 6144}, {14336, 4096}}) {
    std::mt19937 rng(static_cast<uint32_t>(k + n));
    const std::vector<uint8_t> x8 = random_codes(rng, 16 * k), w8 = random_codes(rng, n * k);
    std::vector<float> xs(16), ws(static_cast<size_t>(n));
    std::uniform_real_distribution<float> scale(0.01f, 1.0f);
    for (float& s : xs) s = scale(rng);
    for (float& s : ws) s = scale(rng);
    const Tensor w = gpu_->upload(w8.data(), DType::kF8E4M3, Shape{n, k});
    const Tensor w_scales = gpu_->upload(ws.data(), DType::kF32, Shape{n});
    std::vector<float> alone;  // each token's row computed on its own (T = 1)
    for (int64_t i = 0; i < 16; ++i) {
      Tensor o = gpu_->alloc(DType::kF32, Shape{1, n});
      gpu_->matmul_fp8(o, gpu_->upload(x8.data() + i * k, DType::kF8E4M3, Shape{1, k}),
                       gpu_->upload(&xs[static_cast<size_t>(i)], DType::kF32, Shape{1}), w, w_scales, 0.5f);
      const std::vector<float> row = test::to_f32(*gpu_, o);
      alone.insert(alone.end(), row.begin(), row.end());
    }
    for (int64_t t = 2; t <= 16; ++t) {
      Tensor o = gpu_->alloc(DType::kF32, Shape{t, n});
      gpu_->matmul_fp8(o, gpu_->upload(x8.data(), DType::kF8E4M3, Shape{t, k}),
                       gpu_->upload(xs.data(), DType::kF32, Shape{t}), w, w_scales, 0.5f);
      const std::vector<float> got = test::to_f32(*gpu_, o);
      for (size_t e = 0; e < got.size(); ++e) {
        ASSERT_EQ(got[e], alone[e]) << "K=" << k << " N=" << n << " T=" << t << " token " << static_cast<int64_t>(e) / n
                                    << " row " << static_cast<int64_t>(e) % n;
      }
    }
  }
}

// Every FP8 matmul of up to kFp8WgmmaMatmulMaxTokens tokens on the wgmma kernel (the small-batch kernel and
// cuBLASLt off for them). Each test has a backend of its own, so nothing needs restoring.
void wgmma_matmul_only(CudaBackend& gpu) {
  gpu.set_fp8_small_matmul_max_tokens(0);
  gpu.set_fp8_wgmma_matmul_max_tokens(cuda::kFp8WgmmaMatmulMaxTokens);
}

// The wgmma kernel (fp8_wgmma_matmul.cu) on every element, on small integers (exact in its tensor-core sums:
// any other error is a wrong row, token or split): each token width (32, 64, 96, 128 in one instruction; 160,
// 192, 256 in two) at its edges, also at 1 token (the small-batch kernel turned off); tiles split over up to 9
// CTAs (N 200: 18 units on 18 CTAs), a mix of whole and split tiles (N 1000: 200 units on the SMs), an uneven
// stream of many tiles (N 20000); K with a partial last stage. Each twice, so split tiles also meet counters a kernel left at zero. Its
// precision on random codes is MatmulMatchesTheCpuWithinBf16Rounding's.
TEST_F(CudaFp8, WgmmaMatmulEveryElement) {
  wgmma_matmul_only(*gpu_);
  std::vector<EveryElementCase> cases;
  for (const int64_t t : {1, 17, 32, 33, 64, 65, 96, 97, 128, 129, 160, 161, 192, 193, 256}) {
    cases.emplace_back(t, 1040, 200, true);
  }
  for (const int64_t t : {24, 100, 150, 200}) cases.emplace_back(t, 2064, 1000, true);
  cases.emplace_back(17, 1040, 20000, true);
  for (const EveryElementCase& c : cases) {
    for (int run = 0; run < 2; ++run) c.check(*gpu_, "wgmma");
  }
}

// The wgmma kernel on its stream's share of the SMs (between side_begin and side_join, cuda::fp8_wgmma_stream_sms),
// where the tiles and split units spread over fewer CTAs: on the side stream (8/11 of the SMs) and on the main
// stream while the side one is forked (4/11; 3/11 at tiles over 96 tokens), every element exact as above.
TEST_F(CudaFp8, WgmmaMatmulEveryElementOnAStreamsShareOfTheSms) {
  wgmma_matmul_only(*gpu_);
  std::vector<EveryElementCase> cases;
  for (const int64_t t : {32, 64, 96, 150, 160}) cases.emplace_back(t, 2064, 1000, true);
  cases.emplace_back(17, 1040, 20000, true);
  cases.emplace_back(128, 1040, 200, true);
  for (const bool side : {true, false}) {
    for (const EveryElementCase& c : cases) {
      EveryElementCase::Operands o = c.upload(*gpu_);
      gpu_->side_begin();  // the backend's stream is the side one until side_end
      if (!side) gpu_->side_end();
      EveryElementCase::run(*gpu_, o);
      if (side) gpu_->side_end();
      gpu_->side_join();
      c.expect(*gpu_, o.out, side ? "wgmma, the side stream's share" : "wgmma, the main stream's share");
    }
  }
}

// The fused kernels against the same ops unfused on the GPU (Backend's default compositions: bit for bit,
// since the kernels share their arithmetic), and against the CPU's (f32 norm, then e4m3): dequantized values
// within e4m3's rounding (half a step: 2^-4 relative) of the CPU's exact output, plus bf16's.
class CudaFp8Fused : public CudaFp8 {
 protected:
  struct Codes {
    std::vector<uint8_t> codes;
    std::vector<float> scales;
  };
  Codes get(Backend& b, const Tensor& out8, const Tensor& scales) {
    Codes c{std::vector<uint8_t>(static_cast<size_t>(out8.numel())), std::vector<float>(static_cast<size_t>(scales.numel()))};
    b.download(out8, c.codes.data());
    b.download(scales, c.scales.data());
    return c;
  }
  // Dequantized codes against `want` (the CPU's unquantized f32 values), row by row.
  static void expect_close(const Codes& got, const std::vector<float>& want, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; ++r) {
      double err = 0, norm = 0;
      for (int64_t i = 0; i < cols; ++i) {
        const size_t j = static_cast<size_t>(r * cols + i);
        const double v = fp8::e4m3_to_float(got.codes[j]) * static_cast<double>(got.scales[static_cast<size_t>(r)]);
        err += (v - want[j]) * (v - want[j]);
        norm += static_cast<double>(want[j]) * want[j];
      }
      // e4m3's relative rounding is at most 2^-4 (RMS about 2^-4 / sqrt(3) for spread values).
      EXPECT_LT(std::sqrt(err / norm), 0.045) << "row " << r;
    }
  }
};

TEST_F(CudaFp8Fused, LayerNormFp8) {
  for (int64_t hidden : {int64_t{96}, int64_t{4096}, int64_t{12288}}) {
    const int64_t rows = 5;
    const auto x = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(rows * hidden), 3, 2.0f, 0.5f),
                        Shape{rows, hidden});
    const auto w = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(hidden), 4, 0.2f, 1.0f), Shape{hidden});
    Tensor q = gpu_->alloc(DType::kF8E4M3, Shape{rows, hidden}), s = gpu_->alloc(DType::kF32, Shape{rows});
    Tensor q2 = gpu_->alloc(DType::kF8E4M3, Shape{rows, hidden}), s2 = gpu_->alloc(DType::kF32, Shape{rows});
    Tensor scratch = gpu_->alloc(DType::kBF16, Shape{rows, hidden});
    gpu_->layer_norm_fp8(q, s, x.gpu, w.gpu, 1e-5f, scratch);
    gpu_->Backend::layer_norm_fp8(q2, s2, x.gpu, w.gpu, 1e-5f, scratch);
    const Codes fused = get(*gpu_, q, s), unfused = get(*gpu_, q2, s2);
    EXPECT_EQ(fused.scales, unfused.scales) << hidden;
    EXPECT_EQ(fused.codes, unfused.codes) << hidden;
    Tensor ref = cpu_.alloc(DType::kF32, Shape{rows, hidden});
    cpu_.layer_norm(ref, x.cpu, w.cpu, 1e-5f);
    expect_close(fused, test::to_f32(cpu_, ref), rows, hidden);
  }
}

TEST_F(CudaFp8Fused, ResidualLayerNormFp8) {
  const int64_t rows = 6, hidden = 4096;
  const std::vector<float> h0 = test::random_bf16_values(static_cast<size_t>(rows * hidden), 5, 3.0f);
  const auto a = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(rows * hidden), 6), Shape{rows, hidden});
  const auto b = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(rows * hidden), 7), Shape{rows, hidden});
  const auto w = both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(hidden), 8, 0.2f, 1.0f), Shape{hidden});
  const auto h1 = both(cpu_, *gpu_, h0, Shape{rows, hidden});
  const auto h2 = both(cpu_, *gpu_, h0, Shape{rows, hidden});
  Tensor q = gpu_->alloc(DType::kF8E4M3, Shape{rows, hidden}), s = gpu_->alloc(DType::kF32, Shape{rows});
  Tensor q2 = gpu_->alloc(DType::kF8E4M3, Shape{rows, hidden}), s2 = gpu_->alloc(DType::kF32, Shape{rows});
  Tensor scratch = gpu_->alloc(DType::kBF16, Shape{rows, hidden});
  gpu_->residual_layer_norm_fp8(h1.gpu, a.gpu, b.gpu, q, s, w.gpu, 1e-5f, scratch);
  gpu_->Backend::residual_layer_norm_fp8(h2.gpu, a.gpu, b.gpu, q2, s2, w.gpu, 1e-5f, scratch);
  const Codes fused = get(*gpu_, q, s), unfused = get(*gpu_, q2, s2);
  EXPECT_EQ(fused.scales, unfused.scales);
  EXPECT_EQ(fused.codes, unfused.codes);
  EXPECT_EQ(test::to_f32(*gpu_, h1.gpu), test::to_f32(*gpu_, h2.gpu));  // the residual stream too
  Tensor ref = cpu_.alloc(DType::kF32, Shape{rows, hidden});
  cpu_.residual_layer_norm(h1.cpu, a.cpu, b.cpu, ref, w.cpu, 1e-5f);
  expect_close(fused, test::to_f32(cpu_, ref), rows, hidden);
}

// Few tokens spread each row over several CTAs (one per 2048 elements) that exchange their maxima; more
// tokens, one CTA per row, narrower ones from 512 tokens on (row_tile.cuh's kManyRows; rows past 16384
// elements through shared memory). Rows of R7B's and Command-A's MLP, a row with a short last CTA, and rows
// without 16-byte accesses; each shape twice, so the CTAs' counters are reused.
TEST_F(CudaFp8Fused, SiluMulFp8) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 14336},   {4, 14336},   {16, 14336}, {17, 14336},
                                                {3, 36864},   {16, 36864},  {2, 1000},   {5, 3001},
                                                {600, 14336}, {520, 36864}, {600, 20000}, {513, 8000},
                                                {700, 3001}};
  for (const auto& [rows, inter] : shapes) {
    const auto gate_up =
        both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(rows * 2 * inter), 9, 2.0f),
             Shape{rows, 2 * inter});
    Tensor q = gpu_->alloc(DType::kF8E4M3, Shape{rows, inter}), s = gpu_->alloc(DType::kF32, Shape{rows});
    Tensor q2 = gpu_->alloc(DType::kF8E4M3, Shape{rows, inter}), s2 = gpu_->alloc(DType::kF32, Shape{rows});
    Tensor scratch = gpu_->alloc(DType::kBF16, Shape{rows, inter});
    const std::string what = std::to_string(rows) + " x " + std::to_string(inter);
    for (int run = 0; run < 2; ++run) {
      gpu_->silu_mul_fp8(q, s, gate_up.gpu, scratch);
      gpu_->Backend::silu_mul_fp8(q2, s2, gate_up.gpu, scratch);
      const Codes fused = get(*gpu_, q, s), unfused = get(*gpu_, q2, s2);
      EXPECT_EQ(fused.scales, unfused.scales) << what;
      EXPECT_EQ(fused.codes, unfused.codes) << what;
      if (run == 0) {
        Tensor ref = cpu_.alloc(DType::kF32, Shape{rows, inter});
        cpu_.silu_mul(ref, gate_up.cpu);
        expect_close(fused, test::to_f32(cpu_, ref), rows, inter);
      }
    }
  }
}

class CudaFp8Model : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { TIDE_REQUIRE_GPU(); }
};

// Prompts are computed in chunks of at most 16 tokens (the small-batch kernel's range: two token tiles), in
// chunks of at most 4 (one token tile), whole with the wgmma kernel, and with cuBLASLt for every FP8 matmul (its fast
// accumulation, the default, and partial sums promoted to f32).
TEST_P(CudaFp8Model, LogitsWithinTheFp8AndBf16Bounds) {
  const nlohmann::json g = test::read_json(fixture(GetParam()) / "golden.json");
  const SafetensorsFile tensors = SafetensorsFile::open(fixture(GetParam()) / "golden.safetensors");
  enum class Path { kSmallKernel, kSmallChunks, kWgmma, kCublas, kCublasPromoted };
  for (const Path path : {Path::kSmallKernel, Path::kSmallChunks, Path::kWgmma, Path::kCublas, Path::kCublasPromoted}) {
    EngineOptions options;
    options.quantization = Quantization::kFp8;
    options.kv_cache_memory = int64_t{256} << 20;
    options.max_prefill_chunk = path == Path::kSmallChunks ? 4 : path == Path::kSmallKernel ? 16 : 256;
    auto backend = std::make_unique<CudaBackend>();
    backend->set_fp8_small_matmul_max_tokens(path == Path::kSmallKernel || path == Path::kSmallChunks ? 16 : 0);
    const bool cublas = path == Path::kCublas || path == Path::kCublasPromoted;
    backend->set_fp8_wgmma_matmul_max_tokens(cublas ? 0 : 256);
    backend->set_fp8_fast_accum(path != Path::kCublasPromoted);
    Engine engine(fixture(GetParam()), std::move(backend), options);
    const char* name = path == Path::kSmallKernel    ? "small-batch kernel"
                       : path == Path::kSmallChunks ? "small-batch kernel, chunks of 4"
                       : path == Path::kWgmma       ? "wgmma kernel"
                       : path == Path::kCublas      ? "cuBLASLt"
                                                    : "cuBLASLt, sums promoted to f32";
    for (const auto& c : g["cases"]) {
      const std::vector<float> want = test::golden_tensor(tensors, c["logits_tensor"]);
      std::vector<float> got;
      for (const auto& row : engine.prompt_logits(test::ids_of(c["prompt_ids"]), true)) got.insert(got.end(), row.begin(), row.end());
      const double err = test::rel_err(got, want), bf16 = c["hf_bf16_rel_err"].get<double>();
      std::printf("[ fp8      ] %s %s on the GPU (%s): rel err %.4g = %.1f x transformers' bf16 error\n",
                  GetParam().c_str(), c["name"].get<std::string>().c_str(), name, err, err / bf16);
      EXPECT_LT(err, 18 * bf16) << c["name"] << " " << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaFp8Model, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"));

}  // namespace
}  // namespace tide
