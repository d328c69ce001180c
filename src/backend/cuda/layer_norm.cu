// LayerNorm (no bias) over each row: one block per token, f32 statistics in two passes (mean, then the
// mean squared deviation), matching the reference's numerics. Also fused with the residual update that
// precedes it in the forward pass (h = (h + a) + b), saving two launches and two passes per layer, and with
// the per-token FP8 quantization of its output for FP8 models (the bf16 row is then never written).
#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "core/fp8.h"

namespace tide::cuda {
namespace {

constexpr int kThreads = 256;

struct RowStats {
  float mean;
  float inv_std;
};

// The mean and 1 / sqrt(var + eps) of one row, by the whole block.
__device__ RowStats row_stats(const bf16* row, int64_t hidden, float eps, float* shared) {
  float sum = 0;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) sum += __bfloat162float(row[i]);
  const float mean = block_sum<kThreads>(sum, shared) / static_cast<float>(hidden);
  float sq = 0;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    const float d = __bfloat162float(row[i]) - mean;
    sq += d * d;
  }
  return {mean, rsqrtf(block_sum<kThreads>(sq, shared) / static_cast<float>(hidden) + eps)};
}

// Element i of the normalized row, rounded to bf16: the one expression every kernel here uses.
__device__ __forceinline__ bf16 normalized(const bf16* row, const bf16* w, int64_t i, RowStats s) {
  return __float2bfloat16(__bfloat162float(w[i]) * ((__bfloat162float(row[i]) - s.mean) * s.inv_std));
}

// y = w * (row - mean) / sqrt(var + eps) for one row, by the whole block; y may be row. Each thread reads
// only elements i = threadIdx.x + k * kThreads, so a caller may write `row` with the same stride first.
__device__ void normalize_row(bf16* y, const bf16* row, const bf16* w, int64_t hidden, float eps, float* shared) {
  const RowStats s = row_stats(row, hidden, eps, shared);
  // Every thread has read its elements above, so writing in place (out == x) is safe.
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) y[i] = normalized(row, w, i, s);
}

// normalize_row's bf16 values quantized per token (core/fp8.h), recomputed for the second pass rather than
// kept: the same expression gives the same bits.
__device__ void normalize_row_fp8(uint8_t* q, float* scale_out, const bf16* row, const bf16* w, int64_t hidden,
                                  float eps, float* shared) {
  const RowStats s = row_stats(row, hidden, eps, shared);
  float amax = 0;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) amax = fmaxf(amax, fabsf(__bfloat162float(normalized(row, w, i, s))));
  const float scale = fp8::scale_for_amax(block_max<kThreads>(amax, shared));
  if (threadIdx.x == 0) *scale_out = scale;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    q[i] = fp8::e4m3_from_float(__fdiv_rn(__bfloat162float(normalized(row, w, i, s)), scale));
  }
}

// h = (h + a) + b rounded to bf16 after each add, as two add() calls would; returns h's row.
__device__ bf16* residual_row(bf16* h, const bf16* a, const bf16* b, int64_t hidden) {
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * hidden;
  bf16* row = h + offset;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    const bf16 ha = __float2bfloat16(__bfloat162float(row[i]) + __bfloat162float(a[offset + i]));
    row[i] = __float2bfloat16(__bfloat162float(ha) + __bfloat162float(b[offset + i]));
  }
  return row;
}

__global__ void layer_norm_kernel(bf16* out, const bf16* x, const bf16* w, int64_t hidden, float eps) {
  __shared__ float shared[kThreads / 32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * hidden;
  normalize_row(out + offset, x + offset, w, hidden, eps, shared);
}

__global__ void residual_layer_norm_kernel(bf16* h, const bf16* a, const bf16* b, bf16* out, const bf16* w,
                                           int64_t hidden, float eps) {
  __shared__ float shared[kThreads / 32];
  const bf16* row = residual_row(h, a, b, hidden);
  normalize_row(out + static_cast<int64_t>(blockIdx.x) * hidden, row, w, hidden, eps, shared);
}

__global__ void layer_norm_fp8_kernel(uint8_t* out8, float* scales, const bf16* x, const bf16* w, int64_t hidden,
                                      float eps) {
  __shared__ float shared[kThreads / 32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * hidden;
  normalize_row_fp8(out8 + offset, scales + blockIdx.x, x + offset, w, hidden, eps, shared);
}

__global__ void residual_layer_norm_fp8_kernel(bf16* h, const bf16* a, const bf16* b, uint8_t* out8, float* scales,
                                               const bf16* w, int64_t hidden, float eps) {
  __shared__ float shared[kThreads / 32];
  const bf16* row = residual_row(h, a, b, hidden);
  normalize_row_fp8(out8 + static_cast<int64_t>(blockIdx.x) * hidden, scales + blockIdx.x, row, w, hidden, eps,
                    shared);
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

void launch_layer_norm_fp8(uint8_t* out8, float* scales, const bf16* x, const bf16* w, int64_t num_tokens,
                           int64_t hidden, float eps, cudaStream_t stream) {
  if (num_tokens > 0) {
    layer_norm_fp8_kernel<<<static_cast<unsigned>(num_tokens), kThreads, 0, stream>>>(out8, scales, x, w, hidden, eps);
  }
}

void launch_residual_layer_norm_fp8(bf16* h, const bf16* a, const bf16* b, uint8_t* out8, float* scales,
                                    const bf16* w, int64_t num_tokens, int64_t hidden, float eps,
                                    cudaStream_t stream) {
  if (num_tokens > 0) {
    residual_layer_norm_fp8_kernel<<<static_cast<unsigned>(num_tokens), kThreads, 0, stream>>>(h, a, b, out8, scales,
                                                                                              w, hidden, eps);
  }
}

}  // namespace tide::cuda
