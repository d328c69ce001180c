// Per-token FP8 quantization on the CUDA backend: one block per row finds the row's largest magnitude, then
// writes the scale and the codes with core/fp8.h's arithmetic (one correctly rounded division, then the
// integer e4m3 rounding), so the codes equal the CPU reference's bit for bit. Also fused with the SwiGLU
// activation that feeds the down projection: the bf16 activation is computed twice (the amax pass and the
// quantizing pass) instead of being written and read back.
#include "backend/cuda/activation.cuh"
#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "core/fp8.h"

namespace tide::cuda {
namespace {

constexpr int kThreads = 256;

// Quantizes row `value(i)`, i < cols, whose values are bf16 (as float): scale, then codes.
template <typename Value>
__device__ void quantize_row(uint8_t* q, float* scale_out, int64_t cols, Value&& value) {
  __shared__ float shared[kThreads / 32];
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) amax = fmaxf(amax, fabsf(value(i)));
  const float scale = fp8::scale_for_amax(block_max<kThreads>(amax, shared));
  if (threadIdx.x == 0) *scale_out = scale;
  for (int64_t i = threadIdx.x; i < cols; i += kThreads) q[i] = fp8::e4m3_from_float(__fdiv_rn(value(i), scale));
}

__global__ void quantize_fp8_kernel(uint8_t* __restrict__ out, float* __restrict__ scales, const bf16* __restrict__ x,
                                    int64_t cols) {
  const bf16* row = x + blockIdx.x * cols;
  quantize_row(out + blockIdx.x * cols, scales + blockIdx.x, cols,
               [row](int64_t i) { return __bfloat162float(row[i]); });
}

__global__ void silu_mul_fp8_kernel(uint8_t* __restrict__ out, float* __restrict__ scales,
                                    const bf16* __restrict__ gate_up, int64_t inter) {
  const bf16* gate = gate_up + blockIdx.x * 2 * inter;
  const bf16* up = gate + inter;
  quantize_row(out + blockIdx.x * inter, scales + blockIdx.x, inter, [gate, up](int64_t i) {
    return __bfloat162float(silu_mul_value(__bfloat162float(gate[i]), __bfloat162float(up[i])));
  });
}

}  // namespace

void launch_quantize_fp8(uint8_t* out, float* scales, const bf16* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows > 0) quantize_fp8_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(out, scales, x, cols);
}

void launch_silu_mul_fp8(uint8_t* out8, float* scales, const bf16* gate_up, int64_t num_tokens, int64_t inter,
                         cudaStream_t stream) {
  if (num_tokens > 0) {
    silu_mul_fp8_kernel<<<static_cast<unsigned>(num_tokens), kThreads, 0, stream>>>(out8, scales, gate_up, inter);
  }
}

}  // namespace tide::cuda
