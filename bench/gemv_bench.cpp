// The decode-sized matmul alone: out[T, N] = alpha x[T, K] w[N, K]^T on the weight shapes of R7B (qkv, o,
// gate_up, down, logits) and Command-A (qkv, o, gate_up, down) at T = 1, 2, 4, 8, 16, 32, three ways:
// tide's small-batch kernel (gemv.cu, its default launch shape), cuBLASLt (its heuristic pick, as
// CudaBackend::matmul used it before), and CudaBackend::matmul (whichever its dispatch picks). With
// --gemv-sweep also every launch shape of the kernel (k_split x unroll), to choose the default from.
// Figures: time per matmul, GB/s of weight bytes (N K 2, each read once; x and out are noise at these T)
// and their fraction of the copy ceiling measured in the same run.
// How: a CUDA graph of `calls` matmuls rotating over copies of W that total >= 512 MB (L2 is 60 MB: W comes
// from device memory, as in a forward), replayed; median over replays of time / calls. The graph also
// removes launch gaps, as the forward's graph will.
#include <cublasLt.h>
#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "bench/bench_util.h"
#include "bench/sections.h"

namespace tide::bench {
namespace {

struct MatrixShape {
  const char* model;
  const char* name;
  int64_t n, k;
  bool logits;  // f32 output scaled by logit_scale, as the forward computes logits
};

constexpr MatrixShape kShapes[] = {
    {"r7b", "qkv", 6144, 4096, false},          {"r7b", "o", 4096, 4096, false},
    {"r7b", "gate_up", 28672, 4096, false},     {"r7b", "down", 4096, 14336, false},
    {"r7b", "logits", 256000, 4096, true},      {"command-a", "qkv", 14336, 12288, false},
    {"command-a", "o", 12288, 12288, false},    {"command-a", "gate_up", 73728, 12288, false},
    {"command-a", "down", 12288, 36864, false},
};
constexpr float kLogitScale = 0.25f;
constexpr int64_t kRotationBytes = int64_t{512} << 20;

// cuBLASLt as the reference, planned like CudaBackend::matmul_plan (heuristic top pick, 32 MiB workspace).
class LtMatmul {
 public:
  LtMatmul() {
    TIDE_CUBLAS_CHECK(cublasLtCreate(&lt_));
    TIDE_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  }
  ~LtMatmul() {
    if (d_) cublasLtMatrixLayoutDestroy(d_);
    if (b_) cublasLtMatrixLayoutDestroy(b_);
    if (a_) cublasLtMatrixLayoutDestroy(a_);
    if (op_) cublasLtMatmulDescDestroy(op_);
    cudaFree(workspace_);
    cublasLtDestroy(lt_);
  }
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // One shape per object: out [T, N] (CUDA_R_32F or CUDA_R_16BF), x [T, K], w [N, K].
  void plan(int64_t t, int64_t n, int64_t k, cudaDataType_t out_type) {
    TIDE_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a));
    TIDE_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b));
    TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_, CUDA_R_16BF, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k));
    TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_, CUDA_R_16BF, static_cast<uint64_t>(k), static_cast<uint64_t>(t), k));
    TIDE_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d_, out_type, static_cast<uint64_t>(n), static_cast<uint64_t>(t), n));
    cublasLtMatmulPreference_t pref = nullptr;
    TIDE_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t bytes = kWorkspaceBytes;
    TIDE_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
                                                           sizeof bytes));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, op_, a_, b_, d_, d_, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    TIDE_CUBLAS_CHECK(st);
    if (found == 0) fail("cuBLASLt has no algorithm for T {} N {} K {}", t, n, k);
    algo_ = result.algo;
  }

  void run(void* out, const void* x, const void* w, float alpha, cudaStream_t stream) {
    const float beta = 0.0f;
    TIDE_CUBLAS_CHECK(cublasLtMatmul(lt_, op_, &alpha, w, a_, x, b_, &beta, out, d_, out, d_, &algo_, workspace_,
                                     kWorkspaceBytes, stream));
  }

 private:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  cublasLtMatmulDesc_t op_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

// Median milliseconds per call of `call(i)`, i = 0 .. calls - 1, captured into one graph and replayed
// `replays` times after one untimed replay. `call(0)` runs once before the capture (plans, lazy loading).
double time_graph_ms(cudaStream_t stream, int calls, int replays, const std::function<void(int)>& call) {
  call(0);
  TIDE_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph = nullptr;
  TIDE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    for (int i = 0; i < calls; ++i) call(i);
  } catch (...) {
    cudaStreamEndCapture(stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  TIDE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  TIDE_CUDA_CHECK(inst);
  std::vector<double> ms;
  {
    EventTimer timer(stream);
    for (int r = 0; r < 1 + replays; ++r) {
      timer.start();
      TIDE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      timer.stop();
      const double t = timer.elapsed_ms();
      if (r > 0) ms.push_back(t / calls);
    }
  }
  cudaGraphExecDestroy(exec);
  return median(ms);
}

void measure_shape(CudaBackend& backend, const MatrixShape& shape, const BenchOptions& options, Report& report) {
  const int64_t weight_bytes = shape.n * shape.k * 2;
  const int copies = static_cast<int>(std::clamp<int64_t>((kRotationBytes + weight_bytes - 1) / weight_bytes, 1, 64));
  const int calls = std::max(copies, 4);
  const int replays = options.timed_runs(10, 4);
  std::vector<Tensor> weights;
  for (int i = 0; i < copies; ++i) {
    weights.push_back(backend.alloc(DType::kBF16, Shape{shape.n, shape.k}));
    fill_random(weights.back(), 0.0f, 1.0f / 64.0f, backend.stream());
  }
  const std::string shape_text = fmt::format("{} {} {} x {}", shape.model, shape.name, shape.n, shape.k);
  const DType out_dtype = shape.logits ? DType::kF32 : DType::kBF16;
  const float alpha = shape.logits ? kLogitScale : 1.0f;

  for (int64_t t : options.gemv_tokens) {
    const Tensor x = backend.alloc(DType::kBF16, Shape{t, shape.k});
    fill_random(x, 0.0f, 1.0f, backend.stream());
    Tensor out = backend.alloc(out_dtype, Shape{t, shape.n});
    const auto add_row = [&](const std::string& what, const std::function<void(int)>& call, nlohmann::json details) {
      BenchRow row("gemv", what, shape_text);
      try {
        const double ms = time_graph_ms(backend.stream(), calls, replays, call);
        row.time_ms = ms;
        row.bytes_per_s = static_cast<double>(weight_bytes) / (ms * 1e-3);
      } catch (const std::exception& e) {
        row.note = fmt::format("error: {}", e.what());
      }
      details.update({{"tokens", t}, {"n", shape.n}, {"k", shape.k}, {"weight_bytes", weight_bytes},
                      {"weight_copies", copies}, {"calls_per_graph", calls}, {"replays", replays}});
      row.details = std::move(details);
      report.add(std::move(row));
    };
    const auto w_of = [&](int i) { return static_cast<const cuda::bf16*>(weights[static_cast<size_t>(i % copies)].data); };
    const auto x_data = static_cast<const cuda::bf16*>(x.data);
    int num_sms = 0;
    TIDE_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0));

    if (t <= cuda::kGemvMaxTokens) {
      const cuda::GemvConfig config = cuda::gemv_default_config(t, shape.n, shape.k, num_sms);
      add_row(fmt::format("tide gemv T={}", t),
              [&](int i) {
                cuda::launch_gemv(out.data, shape.logits, x_data, w_of(i), t, shape.n, shape.k, alpha, config,
                                  backend.stream());
              },
              {{"k_split", config.k_split}, {"unroll", config.unroll}});
    }
    {
      LtMatmul lt;
      lt.plan(t, shape.n, shape.k, shape.logits ? CUDA_R_32F : CUDA_R_16BF);
      add_row(fmt::format("cuBLASLt T={}", t), [&](int i) { lt.run(out.data, x_data, w_of(i), alpha, backend.stream()); },
              {});
    }
    add_row(fmt::format("CudaBackend::matmul T={}", t),
            [&](int i) { backend.matmul(out, x, weights[static_cast<size_t>(i % copies)], alpha); }, {});
    if (options.gemv_sweep && t <= cuda::kGemvMaxTokens) {
      for (int k_split : {1, 2, 4, 8, 16}) {
        for (int unroll : {4, 8}) {
          const cuda::GemvConfig config{k_split, unroll};
          add_row(fmt::format("gemv T={} ks={} u={}", t, k_split, unroll),
                  [&](int i) {
                    cuda::launch_gemv(out.data, shape.logits, x_data, w_of(i), t, shape.n, shape.k, alpha, config,
                                      backend.stream());
                  },
                  {{"k_split", k_split}, {"unroll", unroll}});
        }
      }
    }
  }
}

}  // namespace

void run_gemv(const BenchOptions& options, Report& report) {
  for (const MatrixShape& shape : kShapes) {
    CudaBackend backend;  // per shape: the allocator's blocks go back to the device in between
    try {
      measure_shape(backend, shape, options, report);
    } catch (const std::exception& e) {
      report.add(BenchRow("gemv", shape.name, shape.model, fmt::format("error: {}", e.what())));
    }
  }
}

}  // namespace tide::bench
