// Ceilings measured in the same run (design/gpu.md): the device-to-device copy bandwidth (bytes read +
// written) that decode bandwidth is compared to, and the bf16 GEMM throughput of CudaBackend::matmul
// (cuBLASLt) that prefill and attention FLOP rates are compared to.
#include <fmt/format.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "bench/bench_util.h"
#include "bench/sections.h"

namespace tide::bench {
namespace {

constexpr int kWarmup = 2;

// Median milliseconds of `runs` calls of `work` after kWarmup untimed ones.
template <typename Work>
double time_median_ms(cudaStream_t stream, int runs, Work&& work) {
  EventTimer timer(stream);
  std::vector<double> ms;
  for (int i = 0; i < kWarmup + runs; ++i) {
    timer.start();
    work();
    timer.stop();
    const double t = timer.elapsed_ms();
    if (i >= kWarmup) ms.push_back(t);
  }
  return median(ms);
}

double copy_bandwidth(CudaBackend& backend, const BenchOptions& options, Report& report) {
  const int64_t bytes = 2 * kGiB;
  const Tensor src = backend.alloc(DType::kBF16, Shape{bytes / 2});
  const Tensor dst = backend.alloc(DType::kBF16, Shape{bytes / 2});
  fill_random(src, 0.0f, 1.0f, backend.stream());
  const int runs = options.timed_runs(20, 5);
  const double ms = time_median_ms(backend.stream(), runs, [&] {
    TIDE_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice,
                                    backend.stream()));
  });
  const double rate = 2.0 * static_cast<double>(bytes) / (ms * 1e-3);  // read + written
  BenchRow row("ceiling", "copy device-to-device", "2 GiB, bytes read + written");
  row.time_ms = ms;
  row.bytes_per_s = rate;
  row.details = {{"bytes_copied", bytes}, {"runs", runs}};
  report.add(std::move(row));
  return rate;
}

double gemm_throughput(CudaBackend& backend, const BenchOptions& options, Report& report) {
  const int64_t n = 8192;
  const Tensor x = backend.alloc(DType::kBF16, Shape{n, n});
  const Tensor w = backend.alloc(DType::kBF16, Shape{n, n});
  const Tensor out = backend.alloc(DType::kBF16, Shape{n, n});
  fill_random(x, 0.0f, 1.0f, backend.stream());
  fill_random(w, 0.0f, 1.0f / 90.0f, backend.stream());  // ~1/sqrt(n): outputs of unit scale
  const int runs = options.timed_runs(20, 5);
  const double ms = time_median_ms(backend.stream(), runs, [&] { backend.matmul(out, x, w, 1.0f); });
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const double rate = flops / (ms * 1e-3);
  BenchRow row("ceiling", "GEMM bf16 (CudaBackend::matmul)", "8192 x 8192 x 8192");
  row.time_ms = ms;
  row.flops_per_s = rate;
  row.details = {{"flops", flops}, {"runs", runs}};
  report.add(std::move(row));
  return rate;
}

}  // namespace

void run_ceilings(const BenchOptions& options, Report& report) {
  CudaBackend backend;
  Ceilings c;
  c.copy_bytes_per_s = copy_bandwidth(backend, options, report);
  c.gemm_flops_per_s = gemm_throughput(backend, options, report);
  report.set_ceilings(c);
}

}  // namespace tide::bench
