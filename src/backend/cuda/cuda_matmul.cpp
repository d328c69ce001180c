// CudaBackend::matmul through cuBLASLt: bf16 inputs, f32 accumulation, bf16 or f32 output. The algorithm is
// chosen by cuBLASLt's heuristic once per shape and cached.
#include <tuple>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"

namespace tide {
namespace {

// RAII for the cuBLASLt descriptors of one call.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  ~LtDescriptors() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

// out: [T, N], x: [T, K], w: [N, K]. Row-major out = x w^T is column-major out^T = w^T' x^T' with
// cuBLASLt's A = w (K x N column-major, transposed), B = x (K x T column-major), D = out^T (N x T).
void CudaBackend::matmul(Tensor out, const Tensor& x, const Tensor& w, float alpha) {
  const int64_t t = x.dim(0), k = x.dim(1), n = w.dim(0);
  TIDE_CHECK(w.dim(1) == k && out.dim(0) == t && out.dim(1) == n);
  if (x.dtype != DType::kBF16 || w.dtype != DType::kBF16) fail("cuda backend: matmul inputs must be BF16");
  if (out.dtype != DType::kBF16 && out.dtype != DType::kF32) fail("cuda backend: matmul output must be BF16 or F32");
  if (t == 0) return;
  const cudaDataType_t out_type = out.dtype == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF;

  LtDescriptors desc;
  TIDE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a));
  TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b));
  TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.a, CUDA_R_16BF, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k));
  TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.b, CUDA_R_16BF, static_cast<uint64_t>(k), static_cast<uint64_t>(t), k));
  TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.d, out_type, static_cast<uint64_t>(n), static_cast<uint64_t>(t), n));

  const auto key = std::make_tuple(n, t, k, static_cast<int>(out_type));
  auto it = algos_.find(key);
  if (it == algos_.end()) {
    cublasLtMatmulPreference_t pref = nullptr;
    TIDE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    TIDE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace_bytes_, sizeof workspace_bytes_));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st =
        cublasLtMatmulAlgoGetHeuristic(lt_, desc.op, desc.a, desc.b, desc.d, desc.d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    TIDE_CUBLAS_CHECK(st);
    if (found == 0) fail("cuBLASLt has no algorithm for a [{}, {}] x [{}, {}]^T matmul", t, k, n, k);
    it = algos_.emplace(key, result.algo).first;
  }
  const float beta = 0.0f;
  TIDE_CUBLAS_CHECK(cublasLtMatmul(lt_, desc.op, &alpha, w.data, desc.a, x.data, desc.b, &beta, out.data, desc.d,
                                   out.data, desc.d, &it->second, workspace_, workspace_bytes_, stream_));
}

}  // namespace tide
