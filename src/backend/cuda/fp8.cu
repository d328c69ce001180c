// Per-token FP8 quantization on the CUDA backend: one block per row holds the row in registers
// (row_tile.cuh), finds its largest magnitude, then writes the scale and the codes with core/fp8.h's
// arithmetic (one correctly rounded division, then the integer e4m3 rounding), so the codes equal the CPU
// reference's bit for bit. Also fused with the SwiGLU activation that feeds the down projection: the bf16
// activation is never written.
#include "backend/cuda/activation.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/row_tile.cuh"

namespace tide::cuda {
namespace {

template <int kThreads, int kChunks>
__global__ void __launch_bounds__(kThreads)
    quantize_fp8_kernel(uint8_t* __restrict__ out, float* __restrict__ scales, const bf16* __restrict__ x,
                        int64_t cols, bool vec) {
  begin_dependent_kernel();
  __shared__ float shared[kThreads / 32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * cols;
  RowTile<kThreads, kChunks> row;
  row.load(x + offset, cols, vec);
  quantize_tile(row, out + offset, scales + blockIdx.x, cols, vec, shared);
}

template <int kThreads, int kChunks>
__global__ void __launch_bounds__(kThreads)
    silu_mul_fp8_kernel(uint8_t* __restrict__ out, float* __restrict__ scales, const bf16* __restrict__ gate_up,
                        int64_t inter, bool vec) {
  begin_dependent_kernel();
  __shared__ float shared[kThreads / 32];
  const bf16* gate = gate_up + static_cast<int64_t>(blockIdx.x) * 2 * inter;
  RowTile<kThreads, kChunks> g, u;
  g.load(gate, inter, vec);
  u.load(gate + inter, inter, vec);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (decltype(g)::index(c) >= inter) break;  // chunks past the row stay 0
#pragma unroll
    for (int j = 0; j < 8; ++j) g.set(c, j, silu_mul_value(g.at(c, j), u.at(c, j)));
  }
  quantize_tile(g, out + static_cast<int64_t>(blockIdx.x) * inter, scales + blockIdx.x, inter, vec, shared);
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void launch_quantize_fp8(uint8_t* out, float* scales, const bf16* x, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows <= 0) return;
  const bool vec = cols % 8 == 0 && aligned(out) && aligned(x);
  with_row_tile(cols, [&](auto threads, auto chunks) {
    launch_kernel(quantize_fp8_kernel<threads.value, chunks.value>, static_cast<unsigned>(rows), threads.value, 0,
                  stream, out, scales, x, cols, vec);
  });
}

void launch_silu_mul_fp8(uint8_t* out8, float* scales, const bf16* gate_up, int64_t num_tokens, int64_t inter,
                         cudaStream_t stream) {
  if (num_tokens <= 0) return;
  const bool vec = inter % 8 == 0 && aligned(out8) && aligned(gate_up);
  with_row_tile(inter, [&](auto threads, auto chunks) {
    launch_kernel(silu_mul_fp8_kernel<threads.value, chunks.value>, static_cast<unsigned>(num_tokens), threads.value,
                  0, stream, out8, scales, gate_up, inter, vec);
  });
}

}  // namespace tide::cuda
