// The CUDA backend's FP8 path against the CPU reference: per-token quantization bit for bit (both use
// core/fp8.h's arithmetic), the cuBLASLt FP8 matmul with per-row and per-token scales within bf16 output
// rounding, and the fixture models quantized to FP8 at load: logits within the bound the CPU FP8 test
// justifies (16 x transformers' bf16 error) plus the bf16 activations' own error (2 x).
#include <cstdio>
#include <random>

#include "../test_util.h"
#include "core/error.h"
#include "core/fp8.h"
#include "gpu_test_util.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::both;
using test::fixture;

class CudaFp8 : public ::testing::Test {
 protected:
  void SetUp() override {
    TIDE_REQUIRE_GPU();
    gpu_ = std::make_unique<CudaBackend>();
  }
  CpuBackend cpu_;
  std::unique_ptr<CudaBackend> gpu_;
};

TEST_F(CudaFp8, QuantizeMatchesTheCpuBitForBit) {
  for (int64_t cols : {int64_t{96}, int64_t{4096}, int64_t{12288}}) {
    const int64_t rows = 9;
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
    EXPECT_EQ(scales, std::vector<float>(sc.as<float>(), sc.as<float>() + rows)) << cols;
    EXPECT_EQ(codes, std::vector<uint8_t>(qc.as<uint8_t>(), qc.as<uint8_t>() + rows * cols)) << cols;
  }
}

TEST_F(CudaFp8, MatmulMatchesTheCpuWithinBf16Rounding) {
  struct Shape3 {
    int64_t t, k, n;
  };
  for (const Shape3 s : {Shape3{1, 4096, 1024}, Shape3{7, 512, 256}, Shape3{64, 4096, 3072}, Shape3{300, 1024, 512}}) {
    std::mt19937 rng(static_cast<uint32_t>(s.t * 131 + s.k));
    auto codes = [&](int64_t n) {
      std::vector<uint8_t> c(static_cast<size_t>(n));
      for (uint8_t& v : c) {
        v = static_cast<uint8_t>(rng() % 256);
        if ((v & 0x7F) == 0x7F) v = 0x38;  // no NaN codes
      }
      return c;
    };
    const std::vector<uint8_t> x8 = codes(s.t * s.k), w8 = codes(s.n * s.k);
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
    Tensor og = gpu_->alloc(DType::kBF16, Shape{s.t, s.n});
    cpu_.matmul_fp8(oc, c[0], c[1], c[2], c[3], 0.5f);
    gpu_->matmul_fp8(og, g[0], g[1], g[2], g[3], 0.5f);
    const double err = test::rel_err(test::to_f32(*gpu_, og), test::to_f32(cpu_, oc));
    std::printf("[ fp8      ] matmul T=%ld K=%ld N=%ld: rel err %.3g against the CPU\n", static_cast<long>(s.t),
                static_cast<long>(s.k), static_cast<long>(s.n), err);
    EXPECT_LT(err, 2 * test::kBf16Rounding);
  }
}

class CudaFp8Model : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { TIDE_REQUIRE_GPU(); }
};

TEST_P(CudaFp8Model, LogitsWithinTheFp8AndBf16Bounds) {
  const nlohmann::json g = test::read_json(fixture(GetParam()) / "golden.json");
  const SafetensorsFile tensors = SafetensorsFile::open(fixture(GetParam()) / "golden.safetensors");
  EngineOptions options;
  options.quantization = "fp8";
  options.kv_cache_memory = int64_t{256} << 20;
  Engine engine(fixture(GetParam()), std::make_unique<CudaBackend>(), options);
  for (const auto& c : g["cases"]) {
    const std::vector<float> want = test::golden_tensor(tensors, c["logits_tensor"]);
    std::vector<float> got;
    for (const auto& row : engine.prompt_logits(test::ids_of(c["prompt_ids"]), true)) got.insert(got.end(), row.begin(), row.end());
    const double err = test::rel_err(got, want), bf16 = c["hf_bf16_rel_err"].get<double>();
    std::printf("[ fp8      ] %s %s on the GPU: rel err %.4g = %.1f x transformers' bf16 error\n", GetParam().c_str(),
                c["name"].get<std::string>().c_str(), err, err / bf16);
    EXPECT_LT(err, 18 * bf16) << c["name"];
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaFp8Model, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"));

}  // namespace
}  // namespace tide
