// CudaBackend::matmul at decode sizes, where it runs the small-batch kernel of gemv.cu (and past its token
// limit or with K % 8 != 0, cuBLASLt) against CpuBackend::matmul on random inputs. Every n-tile template
// (T <= 8, <= 16, <= 32), every warp split of K and both unroll depths go through launch_gemv directly.
// Tolerances: both sides accumulate the same bf16 products in f32 (in different orders), so an f32 output
// differs by f32 rounding only (1e-5 of the norm); a bf16 output adds one rounding of each element.
#include <tuple>

#include "backend/cuda/kernels.h"
#include "gpu_test_util.h"

namespace tide {
namespace {

class CudaGemv : public ::testing::Test {
 protected:
  void SetUp() override {
    TIDE_REQUIRE_GPU();
    gpu_ = std::make_unique<CudaBackend>();
  }

  struct Case {
    test::Pair x, w;
    std::vector<float> want;  // alpha * x w^T on the CPU
  };

  Case make_case(int64_t t, int64_t k, int64_t n, float alpha, uint32_t seed) {
    Case c{test::both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(t * k), seed), Shape{t, k}),
           test::both(cpu_, *gpu_, test::random_bf16_values(static_cast<size_t>(n * k), seed + 1, 0.05f),
                      Shape{n, k}),
           {}};
    Tensor out = cpu_.alloc(DType::kF32, Shape{t, n});
    cpu_.matmul(out, c.x.cpu, c.w.cpu, alpha);
    c.want = test::to_f32(cpu_, out);
    return c;
  }

  // Through CudaBackend::matmul (the dispatch), both output types.
  void expect_matmul(int64_t t, int64_t k, int64_t n, float alpha, uint32_t seed) {
    const Case c = make_case(t, k, n, alpha, seed);
    Tensor g32 = gpu_->alloc(DType::kF32, Shape{t, n});
    gpu_->matmul(g32, c.x.gpu, c.w.gpu, alpha);
    EXPECT_LT(test::rel_err(test::to_f32(*gpu_, g32), c.want), 1e-5) << "f32 out, T " << t << " K " << k << " N " << n;
    Tensor g16 = gpu_->alloc(DType::kBF16, Shape{t, n});
    gpu_->matmul(g16, c.x.gpu, c.w.gpu, alpha);
    EXPECT_LT(test::rel_err(test::to_f32(*gpu_, g16), c.want), test::kBf16Rounding)
        << "bf16 out, T " << t << " K " << k << " N " << n;
  }

  CpuBackend cpu_;
  std::unique_ptr<CudaBackend> gpu_;
};

TEST_F(CudaGemv, MatchesCpuForEveryTokenCount) {
  // N = 1000: not a multiple of the 16-row tile; T up to 17 crosses the n-tile edges 8 and 16.
  for (int64_t t = 1; t <= 17; ++t) expect_matmul(t, 1024, 1000, 0.5f, static_cast<uint32_t>(100 + t));
  // Past the kernel's limit: cuBLASLt.
  expect_matmul(cuda::kGemvMaxTokens + 1, 512, 200, 1.0f, 300);
}

TEST_F(CudaGemv, OddShapesAndFallbacks) {
  for (auto [t, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 8, 1}, {3, 40, 17}, {1, 4096 + 8, 33},
                         {5, 14336, 64}, {1, 1000, 7},
                         // K % 8 != 0: cuBLASLt.
                         {1, 1001, 96}, {6, 36, 50}}) {
    expect_matmul(t, k, n, 2.0f, static_cast<uint32_t>(t * 7 + k + n));
  }
}

TEST_F(CudaGemv, EveryLaunchShape) {
  const int64_t k = 2048 + 64, n = 16 * 13 + 5;  // a partial last iteration of K and a partial last tile
  for (int64_t t : {1, 8, 9, 16, 17, 32}) {
    const Case c = make_case(t, k, n, 0.125f, static_cast<uint32_t>(500 + t));
    for (int k_split : {1, 2, 4, 8, 16}) {
      for (int unroll : {4, 8}) {
        Tensor g32 = gpu_->alloc(DType::kF32, Shape{t, n});
        cuda::launch_gemv(g32.data, true, static_cast<const cuda::bf16*>(c.x.gpu.data),
                          static_cast<const cuda::bf16*>(c.w.gpu.data), t, n, k, 0.125f,
                          cuda::GemvConfig{k_split, unroll}, gpu_->stream());
        EXPECT_LT(test::rel_err(test::to_f32(*gpu_, g32), c.want), 1e-5)
            << "T " << t << " k_split " << k_split << " unroll " << unroll;
      }
    }
  }
}

TEST(CudaGemvSupports, LeavesUnalignedAndLargeBatchesToCublasLt) {
  // The kernel loads 16 bytes at a time: rows must start on 16-byte boundaries (K % 8 == 0, aligned bases).
  alignas(16) static const cuda::bf16 buffer[16] = {};
  EXPECT_TRUE(cuda::gemv_supports(1, 4096, buffer, buffer));
  EXPECT_TRUE(cuda::gemv_supports(cuda::kGemvMaxTokens, 8, buffer, buffer));
  EXPECT_FALSE(cuda::gemv_supports(cuda::kGemvMaxTokens + 1, 4096, buffer, buffer));
  EXPECT_FALSE(cuda::gemv_supports(0, 4096, buffer, buffer));
  EXPECT_FALSE(cuda::gemv_supports(1, 4100, buffer, buffer));
  EXPECT_FALSE(cuda::gemv_supports(1, 4096, buffer + 1, buffer));
  EXPECT_FALSE(cuda::gemv_supports(1, 4096, buffer, buffer + 4));
}

}  // namespace
}  // namespace tide
