// Ceilings measured in the same run: the device-to-device copy bandwidth (bytes read +
// written); the read bandwidth of cuBLASLt's bf16 GEMV over the 256000 x 4096 logits matrix (2 GB, far past
// L2: the practical ceiling of streaming weights, which decode bandwidth is compared to); the bf16 GEMM
// throughput of CudaBackend::matmul (cuBLASLt) that prefill and attention FLOP rates are compared to, and the
// FP8 GEMM throughput of CudaBackend::matmul_fp8 (cuBLASLt, row and token scales) for FP8 prefill.
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
  fill_random(backend, src, 0.0f, 1.0f);
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
  fill_random(backend, x, 0.0f, 1.0f);
  fill_random(backend, w, 0.0f, 1.0f / 90.0f);  // ~1/sqrt(n): outputs of unit scale
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

double read_bandwidth(CudaBackend& backend, const BenchOptions& options, Report& report) {
  const int64_t rows = 256000, cols = 4096;
  const Tensor w = backend.alloc(DType::kBF16, Shape{rows, cols});
  const Tensor x = backend.alloc(DType::kBF16, Shape{1, cols});
  const Tensor out = backend.alloc(DType::kF32, Shape{1, rows});
  fill_random(backend, w, 0.0f, 0.02f);
  fill_random(backend, x, 0.0f, 1.0f);
  const int runs = options.timed_runs(20, 5);
  const double ms = time_median_ms(backend.stream(), runs, [&] { backend.matmul(out, x, w, 1.0f); });
  const double rate = 2.0 * static_cast<double>(rows * cols) / (ms * 1e-3);
  BenchRow row("ceiling", "read: GEMV bf16 (cuBLASLt)", "1 x 4096 x 256000, weight bytes read");
  row.time_ms = ms;
  row.bytes_per_s = rate;
  row.details = {{"bytes_read", 2 * rows * cols}, {"runs", runs}};
  report.add(std::move(row));
  return rate;
}

double fp8_gemm_throughput(CudaBackend& backend, const BenchOptions& options, Report& report) {
  const int64_t n = 8192;
  const Tensor x = backend.alloc(DType::kBF16, Shape{n, n});
  const Tensor w = backend.alloc(DType::kBF16, Shape{n, n});
  fill_random(backend, x, 0.0f, 1.0f);
  fill_random(backend, w, 0.0f, 1.0f / 90.0f);
  const Tensor x8 = backend.alloc(DType::kF8E4M3, Shape{n, n}), xs = backend.alloc(DType::kF32, Shape{n});
  const Tensor w8 = backend.alloc(DType::kF8E4M3, Shape{n, n}), ws = backend.alloc(DType::kF32, Shape{n});
  backend.quantize_fp8(x8, xs, x);
  backend.quantize_fp8(w8, ws, w);
  const Tensor out = backend.alloc(DType::kBF16, Shape{n, n});
  const int runs = options.timed_runs(20, 5);
  const double ms = time_median_ms(backend.stream(), runs, [&] { backend.matmul_fp8(out, x8, xs, w8, ws, 1.0f); });
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  const double rate = flops / (ms * 1e-3);
  BenchRow row("ceiling", "GEMM fp8 (matmul_fp8)", "8192 x 8192 x 8192, row/token scales");
  row.time_ms = ms;
  row.flops_per_s = rate;
  row.fp8 = true;
  row.details = {{"flops", flops}, {"runs", runs}};
  report.add(std::move(row));
  return rate;
}

}  // namespace

void run_ceilings(const BenchOptions& options, Report& report) {
  CudaBackend backend;
  Ceilings c;
  c.copy_bytes_per_s = copy_bandwidth(backend, options, report);
  c.read_bytes_per_s = read_bandwidth(backend, options, report);
  c.gemm_flops_per_s = gemm_throughput(backend, options, report);
  c.fp8_gemm_flops_per_s = fp8_gemm_throughput(backend, options, report);
  report.set_ceilings(c);
}

}  // namespace tide::bench
