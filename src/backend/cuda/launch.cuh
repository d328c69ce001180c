// Kernel launches with programmatic dependent launch (PDL, Hopper): a kernel may be scheduled while the one
// before it on the stream still runs, so its CTAs are resident and waiting when their input is ready instead
// of being launched then: the launch latency between a decode step's many short kernels is hidden
// (`tide_bench` measures decode without PDL as a baseline).
//
// The rule every kernel launched through launch_kernel() keeps: it calls grid_dependency_wait() before it
// reads anything an earlier kernel writes or writes anything an earlier kernel reads, and every CTA calls it,
// also CTAs with nothing to do (a kernel that completes without waiting would let the kernel after it run
// ahead of the one before). The wait returns once the previous kernel has completed and its writes are
// visible; since that kernel waited too, every earlier kernel has completed as well. What no kernel writes
// may be read before the wait: the weights, and the step's metadata (positions, slots, block tables, which the
// step's first copy writes: when a kernel's CTAs run, the kernel before it has passed its own wait, so every
// kernel and copy before that one has completed).
//
// A kernel lets the next one be scheduled (allow_dependent_launch) only once its own wait has returned, so at
// most one kernel sits waiting behind the running one: the next kernel's CTAs are then spread over an almost
// idle GPU. Letting several kernels queue up resident behind a long one packs their CTAs unevenly onto the
// SMs it leaves free, which slows a bandwidth-bound matmul more than the launch latency it hides. The
// register-fed FP8 matmul does not allow early at all (its CTAs exit as they finish): the kernel after it
// would land beside its CTAs in the same way. The FP8 matmul that streams weights through shared memory
// (fp8_stream_matmul.cu) reads its weights before its wait, which no earlier kernel writes.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace tide::cuda {

// Lets the next kernel of the stream be scheduled (its CTAs then block in grid_dependency_wait()).
__device__ __forceinline__ void allow_dependent_launch() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Blocks until the previous kernel of the stream has completed and its memory operations are visible.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Both, for kernels with nothing to do before their inputs are ready.
__device__ __forceinline__ void begin_dependent_kernel() {
  grid_dependency_wait();
  allow_dependent_launch();
}

// kernel<<<grid, block, smem, stream>>>(args...), allowed to overlap the previous kernel's tail.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   Args&&... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = programmatic_launch() ? 1 : 0;
  TIDE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace tide::cuda
