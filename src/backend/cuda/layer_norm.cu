// LayerNorm (no bias) over each row: one block per token, f32 statistics in two passes (mean, then the
// mean squared deviation), matching the reference's numerics. Also fused with the residual update that
// precedes it in the forward pass (h = (h + a) + b), saving two launches and two passes per layer.
#include "backend/cuda/kernels.h"

namespace tide::cuda {
namespace {

constexpr int kThreads = 256;

__device__ float block_sum(float v, float* shared) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // `shared` may still be read by the previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += shared[w];
  return total;
}

// y = w * (row - mean) / sqrt(var + eps) for one row, by the whole block; y may be row. Each thread reads
// only elements i = threadIdx.x + k * kThreads, so a caller may write `row` with the same stride first.
__device__ void normalize_row(bf16* y, const bf16* row, const bf16* w, int64_t hidden, float eps, float* shared) {
  float sum = 0;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) sum += __bfloat162float(row[i]);
  const float mean = block_sum(sum, shared) / static_cast<float>(hidden);
  float sq = 0;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    const float d = __bfloat162float(row[i]) - mean;
    sq += d * d;
  }
  const float inv_std = rsqrtf(block_sum(sq, shared) / static_cast<float>(hidden) + eps);
  // Every thread has read its elements above, so writing in place (out == x) is safe.
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    y[i] = __float2bfloat16(__bfloat162float(w[i]) * ((__bfloat162float(row[i]) - mean) * inv_std));
  }
}

__global__ void layer_norm_kernel(bf16* out, const bf16* x, const bf16* w, int64_t hidden, float eps) {
  __shared__ float shared[kThreads / 32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * hidden;
  normalize_row(out + offset, x + offset, w, hidden, eps, shared);
}

// h = (h + a) + b rounded to bf16 after each add, as two add() calls would, then out = norm(h).
__global__ void residual_layer_norm_kernel(bf16* h, const bf16* a, const bf16* b, bf16* out, const bf16* w,
                                           int64_t hidden, float eps) {
  __shared__ float shared[kThreads / 32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * hidden;
  bf16* row = h + offset;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    const bf16 ha = __float2bfloat16(__bfloat162float(row[i]) + __bfloat162float(a[offset + i]));
    row[i] = __float2bfloat16(__bfloat162float(ha) + __bfloat162float(b[offset + i]));
  }
  normalize_row(out + offset, row, w, hidden, eps, shared);
}

}  // namespace

void launch_residual_layer_norm(bf16* h, const bf16* a, const bf16* b, bf16* out, const bf16* w, int64_t num_tokens,
                                int64_t hidden, float eps, cudaStream_t stream) {
  if (num_tokens > 0) {
    residual_layer_norm_kernel<<<static_cast<unsigned>(num_tokens), kThreads, 0, stream>>>(h, a, b, out, w, hidden, eps);
  }
}

void launch_layer_norm(bf16* out, const bf16* x, const bf16* w, int64_t num_tokens, int64_t hidden, float eps,
                       cudaStream_t stream) {
  if (num_tokens > 0) layer_norm_kernel<<<static_cast<unsigned>(num_tokens), kThreads, 0, stream>>>(out, x, w, hidden, eps);
}

}  // namespace tide::cuda
