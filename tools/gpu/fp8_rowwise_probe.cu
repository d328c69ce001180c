// Does this CUDA's cuBLASLt run an FP8 E4M3 matmul with outer-vector scales (one f32 scale per row of A and per
// column of B: CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F) on this GPU, and does its result equal the reference
// (decoded codes, f32 sums, both scales)? Prints the heuristic's answer, the max relative error, and a timing at a
// Command-A-sized shape. Build: nvcc -arch=sm_90a -O2 fp8_rowwise_probe.cu -lcublasLt -o fp8_probe
#include <cublasLt.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#define CHECK_CUDA(x) do { cudaError_t e = (x); if (e != cudaSuccess) { std::printf("cuda error %s at %d\n", cudaGetErrorString(e), __LINE__); return 1; } } while (0)
#define CHECK_LT(x) do { cublasStatus_t s = (x); if (s != CUBLAS_STATUS_SUCCESS) { std::printf("cublasLt status %d at line %d\n", int(s), __LINE__); return 1; } } while (0)

static float decode(uint8_t c) {
  __nv_fp8_e4m3 v;
  v.__x = c;
  return float(v);
}

// D[n][t] (column-major [N, T]) = sum_k W[n][k] X[t][k] * ws[n] * xs[t]: A = W (row-major [N, K] = col-major
// [K, N] transposed), B = X (col-major [K, T]).
static int run(int N, int K, int T, bool check, cublasLtHandle_t lt) {
  std::mt19937 rng(1);
  std::vector<uint8_t> w(size_t(N) * K), x(size_t(T) * K);
  for (auto& c : w) { c = uint8_t(rng() & 0xFF); if ((c & 0x7F) == 0x7F) c = 0x30; }
  for (auto& c : x) { c = uint8_t(rng() & 0xFF); if ((c & 0x7F) == 0x7F) c = 0x30; }
  std::vector<float> ws(N), xs(T);
  for (auto& s : ws) s = 0.001f * float(1 + rng() % 100);
  for (auto& s : xs) s = 0.01f * float(1 + rng() % 100);
  uint8_t *dw, *dx; float *dws, *dxs; __nv_bfloat16* dd;
  CHECK_CUDA(cudaMalloc(&dw, w.size())); CHECK_CUDA(cudaMalloc(&dx, x.size()));
  CHECK_CUDA(cudaMalloc(&dws, N * 4)); CHECK_CUDA(cudaMalloc(&dxs, T * 4));
  CHECK_CUDA(cudaMalloc(&dd, size_t(N) * T * 2));
  CHECK_CUDA(cudaMemcpy(dw, w.data(), w.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dx, x.data(), x.size(), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dws, ws.data(), N * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dxs, xs.data(), T * 4, cudaMemcpyHostToDevice));

  cublasLtMatmulDesc_t op;
  CHECK_LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtMatmulMatrixScale_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode));
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode));
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &dws, sizeof dws));
  CHECK_LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &dxs, sizeof dxs));
  cublasLtMatrixLayout_t la, lb, ld;
  CHECK_LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, K, N, K));
  CHECK_LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, K, T, K));
  CHECK_LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, N, T, N));
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  size_t ws_bytes = 64 << 20;
  void* workspace;
  CHECK_CUDA(cudaMalloc(&workspace, ws_bytes));
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
  cublasLtMatmulHeuristicResult_t heur[4];
  int found = 0;
  cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 4, heur, &found);
  std::printf("N=%d K=%d T=%d: heuristic status %d, %d algorithms\n", N, K, T, int(hs), found);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) return 2;
  const float alpha = 1.0f, beta = 0.0f;
  CHECK_LT(cublasLtMatmul(lt, op, &alpha, dw, la, dx, lb, &beta, dd, ld, dd, ld, &heur[0].algo, workspace, ws_bytes, 0));
  CHECK_CUDA(cudaDeviceSynchronize());
  if (check) {
    std::vector<__nv_bfloat16> d(size_t(N) * T);
    CHECK_CUDA(cudaMemcpy(d.data(), dd, d.size() * 2, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int t = 0; t < T; ++t) {
      for (int n = 0; n < N; ++n) {
        double ref = 0, mag = 0;
        for (int k = 0; k < K; ++k) {
          const double p = double(decode(w[size_t(n) * K + k])) * decode(x[size_t(t) * K + k]);
          ref += p; mag += std::fabs(p);
        }
        ref *= double(ws[n]) * xs[t]; mag *= double(ws[n]) * xs[t];
        worst = std::max(worst, std::fabs(double(float(d[size_t(t) * N + n])) - ref) / (mag + 1e-30));
      }
    }
    std::printf("  max |error| / sum|products| = %.3g (bf16 output rounding is 2^-9 = %.3g)\n", worst, 1.0 / 512);
  } else {
    cudaEvent_t a, b;
    cudaEventCreate(&a); cudaEventCreate(&b);
    for (int i = 0; i < 3; ++i) cublasLtMatmul(lt, op, &alpha, dw, la, dx, lb, &beta, dd, ld, dd, ld, &heur[0].algo, workspace, ws_bytes, 0);
    cudaEventRecord(a);
    const int iters = 20;
    for (int i = 0; i < iters; ++i) cublasLtMatmul(lt, op, &alpha, dw, la, dx, lb, &beta, dd, ld, dd, ld, &heur[0].algo, workspace, ws_bytes, 0);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    ms /= iters;
    std::printf("  %.3f ms, %.1f TFLOP/s, %.0f GB/s of weights\n", ms, 2.0 * N * K * T / ms / 1e9, double(N) * K / ms / 1e6);
  }
  return 0;
}

int main() {
  cublasLtHandle_t lt;
  CHECK_LT(cublasLtCreate(&lt));
  int v = 0;
  cudaRuntimeGetVersion(&v);
  std::printf("CUDA runtime %d, cublasLt %zu\n", v, cublasLtGetVersion());
  int rc = run(256, 512, 48, true, lt);
  if (rc == 0) rc = run(4096, 4096, 8, true, lt);
  if (rc == 0) {
    run(12288, 12288, 1, false, lt);     // Command-A o_proj-like, decode batch 1
    run(12288, 12288, 32, false, lt);
    run(8192, 8192, 8192, false, lt);    // the FP8 ceiling shape
  }
  return rc;
}
