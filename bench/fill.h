// Random bf16 fill on the GPU for the benchmarks: synthetic weights and KV caches are generated in place on
// the device (never staged through host memory, never zeros). Not a statistics-grade generator: a hash of
// (seed, index) per element, uniform in [center - amplitude, center + amplitude].
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tide::bench {

// data: [n] bf16 in device memory. Queued on `stream`; returns the launch status.
cudaError_t launch_fill_uniform_bf16(void* data, int64_t n, float center, float amplitude, uint64_t seed,
                                     cudaStream_t stream);

}  // namespace tide::bench
