// CudaBackend::matmul and matmul_fp8: bf16 (or E4M3 with row / token scales) inputs, f32 accumulation, bf16 or
// f32 output. FP8 up to 16 tokens runs tide's small-batch kernels (fp8_small_matmul.cu; bf16 too on small
// weights: cuda::bf16_small_matmul_preferred); FP8 of 17-160 tokens its wgmma kernel at the tile widths where
// that is faster (cuda::fp8_wgmma_preferred); the rest cuBLASLt. cuBLASLt's descriptors and algorithm (its
// heuristic pick) are made once per shape and kept: creating them costs more host time than a decode-sized
// GEMM takes on the GPU.
#include <algorithm>
#include <cstdint>
#include <tuple>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace tide {

// Plan of out[T, N] = x[T, K] w[N, K]^T. Row-major out = x w^T is column-major out^T = op(w) x^T' with
// cuBLASLt's A = w (K x N column-major, transposed), B = x (K x T column-major), D = out^T (N x T).
//
// FP8 plans (fp8): A = w8 and B = x8 in E4M3 with outer-vector f32 scales (A's one per weight row, B's one per
// token); the scale pointers are set on the descriptor at each call.
CudaBackend::MatmulPlan& CudaBackend::matmul_plan(int64_t t, int64_t k, int64_t n, cudaDataType_t out_type, bool fp8) {
  const bool fast_accum = fp8 && fp8_fast_accum_;
  const auto key = std::make_tuple(n, t, k, static_cast<int>(out_type), fp8, fast_accum);
  auto it = matmul_plans_.find(key);
  if (it != matmul_plans_.end()) return *it->second;

  auto plan = std::make_unique<MatmulPlan>();
  TIDE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a));
  TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b));
  if (fp8) {
    const cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode));
    TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode));
    // The heuristic refuses outer-vector scales without scale pointers: an aligned placeholder stands in until
    // a call sets the real ones.
    const void* placeholder = workspace_;
    TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &placeholder, sizeof placeholder));
    TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &placeholder, sizeof placeholder));
    const int8_t fast = fast_accum ? 1 : 0;
    TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
  }
  const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, in_type, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k));
  TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, in_type, static_cast<uint64_t>(k), static_cast<uint64_t>(t), k));
  TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, out_type, static_cast<uint64_t>(n), static_cast<uint64_t>(t), n));

  cublasLtMatmulPreference_t pref = nullptr;
  TIDE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const cublasStatus_t set = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                  &workspace_bytes_, sizeof workspace_bytes_);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = set != CUBLAS_STATUS_SUCCESS
                                ? set
                                : cublasLtMatmulAlgoGetHeuristic(lt_, plan->op, plan->a, plan->b, plan->d, plan->d,
                                                                 pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  TIDE_CUBLAS_CHECK(st);
  if (found == 0) fail("cuBLASLt has no {} algorithm for a [{}, {}] x [{}, {}]^T matmul", fp8 ? "FP8" : "BF16", t, k, n, k);
  plan->algo = result.algo;
  return *matmul_plans_.emplace(key, std::move(plan)).first->second;
}

namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

// out: [T, N], x8: [T, K], x_scales: [T], w8: [N, K], w_scales: [N]
void CudaBackend::matmul_fp8(Tensor out, const Tensor& x8, const Tensor& x_scales, const Tensor& w8,
                             const Tensor& w_scales, float alpha) {
  const int64_t t = x8.dim(0), k = x8.dim(1), n = w8.dim(0);
  TIDE_CHECK(w8.dim(1) == k && out.dim(0) == t && out.dim(1) == n && x_scales.numel() == t && w_scales.numel() == n);
  if (x8.dtype != DType::kF8E4M3 || w8.dtype != DType::kF8E4M3) fail("cuda backend: matmul_fp8 inputs must be F8_E4M3");
  if (x_scales.dtype != DType::kF32 || w_scales.dtype != DType::kF32) fail("cuda backend: matmul_fp8 scales must be F32");
  if (out.dtype != DType::kBF16 && out.dtype != DType::kF32) fail("cuda backend: matmul_fp8 output must be BF16 or F32");
  if (t == 0) return;
  // tide's kernels' parameters (the wgmma kernel has one shape: it ignores the variant).
  const cuda::Fp8SmallMatmul p{out.data, out.dtype == DType::kF32, static_cast<const uint8_t*>(x8.data),
                               static_cast<const float*>(x_scales.data), static_cast<const uint8_t*>(w8.data),
                               static_cast<const float*>(w_scales.data), alpha, t, k, n, fp8_small_variant_,
                               split_scratch_};
  if (t <= fp8_small_max_tokens_ && cuda::fp8_small_matmul_supports(t, k, n) && aligned16(x8.data) &&
      aligned16(w8.data)) {
    cuda::launch_fp8_small_matmul(p, num_sms_, stream_);
    return;
  }
  const bool wgmma = fp8_wgmma_max_tokens_ < 0 ? cuda::fp8_wgmma_preferred(t) : t <= fp8_wgmma_max_tokens_;
  const int sms = side_forked_ && fp8_wgmma_stream_shares_
                      ? cuda::fp8_wgmma_stream_sms(num_sms_, stream_ == side_stream_, t)
                      : num_sms_;
  if (wgmma && cuda::fp8_wgmma_matmul_supports(t, k, n) && cuda::launch_fp8_wgmma_matmul(p, sms, stream_)) {
    return;
  }
  MatmulPlan& plan = matmul_plan(t, k, n, out.dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF, /*fp8=*/true);
  const void* a_scale = w_scales.data;
  const void* b_scale = x_scales.data;
  TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof a_scale));
  TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof b_scale));
  const float beta = 0.0f;
  TIDE_CUBLAS_CHECK(cublasLtMatmul(lt_, plan.op, &alpha, w8.data, plan.a, x8.data, plan.b, &beta, out.data, plan.d,
                                   out.data, plan.d, &plan.algo, workspace_, workspace_bytes_, stream_));
}

void CudaBackend::set_fp8_small_matmul_max_tokens(int64_t t) {
  fp8_small_max_tokens_ = std::clamp<int64_t>(t, 0, cuda::kFp8SmallMatmulMaxTokens);
}

void CudaBackend::set_bf16_small_matmul_max_tokens(int64_t t) {
  bf16_small_max_tokens_ = t < 0 ? -1 : std::min(t, cuda::kBf16SmallMatmulMaxTokens);
}

void CudaBackend::set_fp8_wgmma_matmul_max_tokens(int64_t t) {
  fp8_wgmma_max_tokens_ = t < 0 ? -1 : std::min(t, cuda::kFp8WgmmaMatmulMaxTokens);
}

int CudaBackend::set_fp8_small_matmul_variant(int variant) {
  fp8_small_variant_ = variant;
  return cuda::fp8_small_matmul_num_variants();
}

const char* CudaBackend::fp8_tensor_map_feed() { return cuda::fp8_stream_tensor_feed(); }

// out: [T, N], x: [T, K], w: [N, K]
void CudaBackend::matmul(Tensor out, const Tensor& x, const Tensor& w, float alpha) {
  const int64_t t = x.dim(0), k = x.dim(1), n = w.dim(0);
  TIDE_CHECK(w.dim(1) == k && out.dim(0) == t && out.dim(1) == n);
  if (x.dtype != DType::kBF16 || w.dtype != DType::kBF16) fail("cuda backend: matmul inputs must be BF16");
  if (out.dtype != DType::kBF16 && out.dtype != DType::kF32) fail("cuda backend: matmul output must be BF16 or F32");
  if (t == 0) return;
  const bool small = bf16_small_max_tokens_ < 0 ? cuda::bf16_small_matmul_preferred(t, k, n)
                                                : t <= bf16_small_max_tokens_;
  if (small && cuda::bf16_small_matmul_supports(t, k, n) && aligned16(x.data) && aligned16(w.data)) {
    cuda::launch_bf16_small_matmul(cuda::Bf16SmallMatmul{out.data, out.dtype == DType::kF32,
                                                         static_cast<const cuda::bf16*>(x.data),
                                                         static_cast<const cuda::bf16*>(w.data), alpha, t, k, n},
                                   num_sms_, stream_);
    return;
  }
  const MatmulPlan& plan = matmul_plan(t, k, n, out.dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF, /*fp8=*/false);
  const float beta = 0.0f;
  TIDE_CUBLAS_CHECK(cublasLtMatmul(lt_, plan.op, &alpha, w.data, plan.a, x.data, plan.b, &beta, out.data, plan.d,
                                   out.data, plan.d, &plan.algo, workspace_, workspace_bytes_, stream_));
}

}  // namespace tide
