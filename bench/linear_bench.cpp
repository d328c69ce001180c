// The linear layers at decode batch sizes: for each kind (qkv, o, gate_up, down) and token count T, the
// kind's matmul of every layer in a row, so the weights streamed (all layers' matrices of the kind) are far
// larger than L2, as in a decode step. Bandwidth counts the weight bytes (and FP8 row scales) read once. FP8
// weights run twice: tide's kernel for T (fp8_small_matmul.cu up to 16 tokens, fp8_wgmma_matmul.cu up to 256)
// and cuBLASLt, same inputs.
#include <fmt/format.h>

#include <limits>
#include <memory>

#include "backend/cuda/cuda_backend.h"
#include "bench/bench_util.h"
#include "bench/sections.h"

namespace tide::bench {
namespace {

struct Kind {
  const char* name;
  const Linear LayerWeights::*linear;
};

constexpr Kind kKinds[] = {{"qkv", &LayerWeights::qkv},
                           {"o", &LayerWeights::o},
                           {"gate_up", &LayerWeights::gate_up},
                           {"down", &LayerWeights::down}};

void linear_point(const BenchModel& m, CudaBackend& backend, const BenchOptions& options, const Kind& kind,
                  int64_t num_tokens, bool tide_kernel, Report& report) {
  const std::vector<LayerWeights>& layers = m.weights.layers;
  const Linear& first = layers.front().*kind.linear;
  const int64_t n = first.weight.dim(0), k = first.weight.dim(1);
  const bool fp8 = first.fp8();
  const bool small = num_tokens <= cuda::kFp8SmallMatmulMaxTokens;
  const bool wgmma = num_tokens <= cuda::kFp8WgmmaMatmulMaxTokens;
  const std::string path = !fp8                   ? "bf16 cuBLASLt"
                           : tide_kernel && small ? "fp8 small-batch kernel"
                           : tide_kernel && wgmma ? "fp8 wgmma kernel"
                                                  : "fp8 cuBLASLt";
  BenchRow row("linear", fmt::format("{} T={} {}", kind.name, num_tokens, path),
               fmt::format("{} layers x [{}, {}]", layers.size(), n, k));
  row.fp8 = fp8;

  const Tensor x = backend.alloc(DType::kBF16, Shape{num_tokens, k});
  fill_random(backend, x, 0.0f, 1.0f);
  const Tensor x8 = backend.alloc(DType::kF8E4M3, Shape{num_tokens, k});
  const Tensor xs = backend.alloc(DType::kF32, Shape{num_tokens});
  if (fp8) backend.quantize_fp8(x8, xs, x);
  const Tensor out = backend.alloc(DType::kBF16, Shape{num_tokens, n});
  backend.set_fp8_small_matmul_max_tokens(tide_kernel ? std::numeric_limits<int64_t>::max() : 0);
  backend.set_fp8_wgmma_matmul_max_tokens(tide_kernel ? std::numeric_limits<int64_t>::max() : 0);
  auto all_layers = [&] {
    for (const LayerWeights& lw : layers) {
      const Linear& l = lw.*kind.linear;
      if (fp8) {
        backend.matmul_fp8(out, x8, xs, l.weight, l.scale, 1.0f);
      } else {
        backend.matmul(out, x, l.weight, 1.0f);
      }
    }
  };
  all_layers();  // warm-up: cuBLASLt's algorithm choice
  EventTimer timer(backend.stream());
  std::vector<double> ms;
  for (int i = 0; i < options.timed_runs(10, 3); ++i) {
    timer.start();
    all_layers();
    timer.stop();
    ms.push_back(timer.elapsed_ms());
  }
  const double t = median(ms);
  const int64_t bytes_per_layer = fp8 ? n * k + 4 * n : 2 * n * k;
  const auto num_layers = static_cast<int64_t>(layers.size());
  row.time_ms = t / static_cast<double>(num_layers);
  row.bytes_per_s = static_cast<double>(bytes_per_layer * num_layers) / (t * 1e-3);
  // No flops_per_s: the % column is the bandwidth's (the limit at these sizes); the FLOP rate is a detail.
  row.details = {{"tokens", num_tokens}, {"n", n}, {"k", k}, {"layers", num_layers},
                 {"weight_bytes_per_layer", bytes_per_layer}, {"runs", ms.size()},
                 {"flops_per_s", 2.0 * static_cast<double>(n * k * num_tokens * num_layers) / (t * 1e-3)}};
  report.add(std::move(row));
}

}  // namespace

void run_linear(const BenchModel& m, const BenchOptions& options, Report& report) {
  auto backend = std::make_unique<CudaBackend>();
  backend->set_fp8_fast_accum(!options.fp8_exact_accum);
  backend->set_fp8_small_matmul_variant(options.fp8_variant);
  const bool fp8 = m.weights.layers.front().qkv.fp8();
  for (int64_t num_tokens : options.linear_tokens) {
    for (const Kind& kind : kKinds) {
      for (bool tide_kernel : fp8 ? std::vector<bool>{true, false} : std::vector<bool>{false}) {
        try {
          linear_point(m, *backend, options, kind, num_tokens, tide_kernel, report);
        } catch (const std::exception& e) {
          report.add(BenchRow("linear", fmt::format("{} T={}", kind.name, num_tokens), "",
                              fmt::format("error: {}", e.what())));
        }
      }
    }
  }
}

}  // namespace tide::bench
