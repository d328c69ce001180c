#include "bench/bench_util.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"

namespace tide::bench {

EventTimer::EventTimer(cudaStream_t stream) : stream_(stream) {
  TIDE_CUDA_CHECK(cudaEventCreate(&start_));
  TIDE_CUDA_CHECK(cudaEventCreate(&stop_));
}

EventTimer::~EventTimer() {
  cudaEventDestroy(stop_);
  cudaEventDestroy(start_);
}

void EventTimer::start() { TIDE_CUDA_CHECK(cudaEventRecord(start_, stream_)); }

void EventTimer::stop() { TIDE_CUDA_CHECK(cudaEventRecord(stop_, stream_)); }

float EventTimer::elapsed_ms() {
  TIDE_CUDA_CHECK(cudaEventSynchronize(stop_));
  TIDE_CUDA_CHECK(cudaGetLastError());
  float ms = 0.0f;
  TIDE_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
  return ms;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

void fill_random(Backend& backend, const Tensor& t, float center, float amplitude) {
  static uint64_t next_seed = 0x5eed;
  backend.fill_uniform(t, center, amplitude, next_seed++);
}

void fill_kv(CudaBackend& backend, const KvStorage& kv) {
  if (!kv.fp8()) return fill_random(backend, kv.data, 0.0f, 1.0f);
  const cudaStream_t stream = backend.stream();
  TIDE_CUDA_CHECK(cudaMemsetAsync(kv.data.data, 0x38, kv.data.nbytes(), stream));
  TIDE_CUDA_CHECK(cudaMemsetAsync(kv.scales.data, 0x3C, kv.scales.nbytes(), stream));
}

int64_t free_device_bytes() {
  size_t free = 0, total = 0;
  TIDE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<int64_t>(free);
}

int64_t keys_attended_sum(int64_t window, int64_t begin, int64_t end) {
  // Positions below the window's edge attend p + 1 keys (an arithmetic series); the rest attend W.
  const int64_t edge = window == 0 ? end : std::clamp<int64_t>(window - 1, begin, end);  // first pos with W keys
  const int64_t ramp = (begin + 1 + edge) * (edge - begin) / 2;                         // sum of p + 1 below
  return ramp + (end - edge) * window;
}

}  // namespace tide::bench
