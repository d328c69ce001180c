// CudaBackend::matmul: bf16 inputs, f32 accumulation, bf16 or f32 output. Decode-sized batches go to the
// weight-streaming kernel of gemv.cu, the rest to cuBLASLt, whose descriptors and algorithm (its heuristic
// pick) are made once per shape and kept: creating them costs more host time than a decode-sized GEMM takes
// on the GPU.
#include <cstdlib>
#include <string_view>
#include <tuple>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace tide {

// Plan of out[T, N] = x[T, K] w[N, K]^T. Row-major out = x w^T is column-major out^T = op(w) x^T' with
// cuBLASLt's A = w (K x N column-major, transposed), B = x (K x T column-major), D = out^T (N x T).
const CudaBackend::MatmulPlan& CudaBackend::matmul_plan(int64_t t, int64_t k, int64_t n, cudaDataType_t out_type) {
  const auto key = std::make_tuple(n, t, k, static_cast<int>(out_type));
  auto it = matmul_plans_.find(key);
  if (it != matmul_plans_.end()) return *it->second;

  auto plan = std::make_unique<MatmulPlan>();
  TIDE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a));
  TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b));
  TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, CUDA_R_16BF, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k));
  TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, CUDA_R_16BF, static_cast<uint64_t>(k), static_cast<uint64_t>(t), k));
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
  if (found == 0) fail("cuBLASLt has no algorithm for a [{}, {}] x [{}, {}]^T matmul", t, k, n, k);
  plan->algo = result.algo;
  return *matmul_plans_.emplace(key, std::move(plan)).first->second;
}

namespace {

// Which matmuls go to the small-batch kernel: T <= 16 and a weight matrix of at most 64 MiB. Measured on an
// H200 (tide_bench --sections gemv --gemv-sweep, CUDA graphs, weights rotated past L2; docs/PERFORMANCE.md,
// 2026-12-02): the kernel beats cuBLASLt on the latency-bound small matrices (R7B o 4096 x 4096: 12.0-12.6
// vs 13.1-13.5 us for T = 1-16; qkv 6144 x 4096: 15.9-17.2 vs 15.9-17.8 us), ties on 4096 x 14336 (117 MB:
// 31.8-32.2 vs 31.7-31.9 us) and trails by 1-6% on the larger ones, where cuBLASLt's GEMV already reads at
// 87-104% of the copy ceiling (R7B gate_up, logits; every Command-A matrix). At T = 32 cuBLASLt wins
// everywhere (o: 13.9 vs 14.7 us at best).
constexpr int64_t kGemvDispatchMaxTokens = 16;
constexpr int64_t kGemvDispatchMaxWeightBytes = int64_t{64} << 20;

// TIDE_CUDA_NO_GEMV=1 sends every matmul to cuBLASLt: the A/B switch for benchmarks (read once).
bool gemv_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("TIDE_CUDA_NO_GEMV");
    return v == nullptr || std::string_view(v) == "0" || std::string_view(v).empty();
  }();
  return enabled;
}

}  // namespace

// out: [T, N], x: [T, K], w: [N, K]
void CudaBackend::matmul(Tensor out, const Tensor& x, const Tensor& w, float alpha) {
  const int64_t t = x.dim(0), k = x.dim(1), n = w.dim(0);
  TIDE_CHECK(w.dim(1) == k && out.dim(0) == t && out.dim(1) == n);
  if (x.dtype != DType::kBF16 || w.dtype != DType::kBF16) fail("cuda backend: matmul inputs must be BF16");
  if (out.dtype != DType::kBF16 && out.dtype != DType::kF32) fail("cuda backend: matmul output must be BF16 or F32");
  if (t == 0) return;
  if (gemv_enabled() && t <= kGemvDispatchMaxTokens && n * k * 2 <= kGemvDispatchMaxWeightBytes &&
      cuda::gemv_supports(t, k, x.data, w.data)) {
    cuda::launch_gemv(out.data, out.dtype == DType::kF32, static_cast<const cuda::bf16*>(x.data),
                      static_cast<const cuda::bf16*>(w.data), t, n, k, alpha,
                      cuda::gemv_default_config(t, n, k, num_sms_), stream_);
    return;
  }
  const MatmulPlan& plan = matmul_plan(t, k, n, out.dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF);
  const float beta = 0.0f;
  TIDE_CUBLAS_CHECK(cublasLtMatmul(lt_, plan.op, &alpha, w.data, plan.a, x.data, plan.b, &beta, out.data, plan.d,
                                   out.data, plan.d, &plan.algo, workspace_, workspace_bytes_, stream_));
}

}  // namespace tide
