// The per-token FP8 quantization of the CUDA backend: one block per row finds the row's largest magnitude, then
// writes the scale and the codes with core/fp8.h's arithmetic (one correctly rounded division, then the
// integer e4m3 rounding), so the codes equal the CPU reference's bit for bit.
#include "backend/cuda/kernels.h"
#include "core/fp8.h"

namespace tide::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void quantize_fp8_kernel(uint8_t* __restrict__ out, float* __restrict__ scales, const bf16* __restrict__ x,
                                    int64_t cols) {
  const bf16* row = x + blockIdx.x * cols;
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) amax = fmaxf(amax, fabsf(__bfloat162float(row[i])));
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  __shared__ float warp_max[kThreads / 32];
  __shared__ float row_scale;
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
    row_scale = fp8::scale_for_amax(m);
    scales[blockIdx.x] = row_scale;
  }
  __syncthreads();
  const float scale = row_scale;
  uint8_t* q = out + blockIdx.x * cols;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) {
    q[i] = fp8::e4m3_from_float(__fdiv_rn(__bfloat162float(row[i]), scale));
  }
}

}  // namespace

void launch_quantize_fp8(uint8_t* out, float* scales, const bf16* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows > 0) quantize_fp8_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(out, scales, x, cols);
}

}  // namespace tide::cuda
