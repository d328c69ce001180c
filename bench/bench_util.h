// Small pieces every benchmark section uses: CUDA-event timing on the backend's stream, medians, random
// device fills of tensors, free device memory, and the attention key counts the FLOP and byte figures use.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "core/tensor.h"

namespace tide::bench {

inline constexpr int64_t kGiB = int64_t{1} << 30;

// Times work queued on one stream between start() and stop() with a pair of CUDA events.
class EventTimer {
 public:
  explicit EventTimer(cudaStream_t stream);
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start();
  void stop();
  // Waits for the stop event; milliseconds between the events. Throws tide::Error on a CUDA error (also one
  // left by an unchecked kernel launch in between).
  float elapsed_ms();

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

double median(std::vector<double> values);

// Fills a device tensor (BF16 or F32) with uniform values in [center - amplitude, center + amplitude)
// (Backend::fill_uniform, made on the GPU), each call with a fresh seed. Queued on the backend's stream.
void fill_random(Backend& backend, const Tensor& t, float center, float amplitude);
// A KV cache's storage with finite keys and values: bf16 uniform in [-1, 1], or FP8 codes 0x38 (1.0) with
// scales of bytes 0x3C (0.0115) (attention's timing does not depend on the values).
void fill_kv(CudaBackend& backend, const KvStorage& kv);

// Free device memory now (cudaMemGetInfo).
int64_t free_device_bytes();

// Keys a query at position `pos` attends in a layer of window `window` (0: global): p+1 or min(p+1, W).
inline int64_t keys_attended(int64_t window, int64_t pos) {
  return window == 0 || pos + 1 < window ? pos + 1 : window;
}
// Sum of keys_attended over positions [begin, end).
int64_t keys_attended_sum(int64_t window, int64_t begin, int64_t end);

}  // namespace tide::bench
