// LayerNorm (no bias) over each row: one block per token holding the row in registers (row_tile.cuh), f32
// statistics in two passes (mean, then the mean squared deviation), matching the reference's numerics. Also
// fused with the residual update that precedes it in the forward pass (h = (h + a) + b), and with the
// per-token FP8 quantization of its output for FP8 models (the bf16 row is then never written). Every
// variant runs the same kernel body, so the fused outputs equal the unfused ops' bit for bit.
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/row_tile.cuh"

namespace tide::cuda {
namespace {

struct NormParams {
  bf16* h = nullptr;          // kResidual: the residual stream, updated to (h + a) + b
  const bf16* a = nullptr;
  const bf16* b = nullptr;
  const bf16* x = nullptr;    // !kResidual: the input rows
  bf16* out = nullptr;        // !kFp8: the normalized rows (may be x)
  uint8_t* out8 = nullptr;    // kFp8: codes and per-token scales
  float* scales = nullptr;
  const bf16* w = nullptr;
  int64_t hidden = 0;
  float eps = 0;
  bool vec = false;           // every row pointer 16-byte aligned and hidden % 8 == 0
};

template <int kThreads, int kChunks, bool kResidual, bool kFp8>
__global__ void __launch_bounds__(kThreads) norm_kernel(NormParams p) {
  using Tile = RowTile<kThreads, kChunks>;
  const int64_t n = p.hidden, offset = static_cast<int64_t>(blockIdx.x) * n;
  // The norm's weight is read before waiting for the kernel before (no kernel writes it): at decode sizes its
  // load is one of the few round trips on the layer's serial path. Not for tiles of many chunks, whose
  // registers it would spill (rows past 16384 elements).
  constexpr bool kEarlyWeight = kChunks <= 2;
  Tile w;
  if constexpr (kEarlyWeight) w.load(p.w, n, p.vec);
  begin_dependent_kernel();
  __shared__ float shared[kThreads / 32];
  Tile x;
  if constexpr (kResidual) {
    // h = (h + a) + b rounded to bf16 after each add, as two add() calls would.
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const uint4 h = Tile::load_chunk(c, p.h + offset, n, p.vec), a = Tile::load_chunk(c, p.a + offset, n, p.vec),
                  b = Tile::load_chunk(c, p.b + offset, n, p.vec);
      const bf16* hv = reinterpret_cast<const bf16*>(&h);
      const bf16* av = reinterpret_cast<const bf16*>(&a);
      const bf16* bv = reinterpret_cast<const bf16*>(&b);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const bf16 ha = __float2bfloat16(__bfloat162float(hv[j]) + __bfloat162float(av[j]));
        x.set(c, j, __float2bfloat16(__bfloat162float(ha) + __bfloat162float(bv[j])));
      }
    }
    x.store(p.h + offset, n, p.vec);
  } else {
    x.load(p.x + offset, n, p.vec);
  }

  // Chunks past the row hold zeros: skipped (a row of 4096 fills 2 of the 256 x 8 tile's 8 chunks).
  float sum = 0;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (Tile::index(c) >= n) break;
#pragma unroll
    for (int j = 0; j < 8; ++j) sum += x.at(c, j);  // elements past the row are 0
  }
  const float mean = block_sum<kThreads>(sum, shared) / static_cast<float>(n);
  float sq = 0;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (Tile::index(c) >= n) break;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float d = x.at(c, j) - mean;
      if (Tile::index(c) + j < n) sq += d * d;
    }
  }
  const float inv_std = rsqrtf(block_sum<kThreads>(sq, shared) / static_cast<float>(n) + p.eps);
  if constexpr (!kEarlyWeight) w.load(p.w, n, p.vec);

#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (Tile::index(c) >= n) break;
#pragma unroll
    for (int j = 0; j < 8; ++j) x.set(c, j, __float2bfloat16(w.at(c, j) * ((x.at(c, j) - mean) * inv_std)));
  }
  if constexpr (kFp8) {
    // Elements past the row are w (0) times something: 0, so they do not move the row's amax.
    quantize_tile(x, p.out8 + offset, p.scales + blockIdx.x, n, p.vec, shared);
  } else {
    x.store(p.out + offset, n, p.vec);
  }
}

template <bool kResidual, bool kFp8>
void launch_norm(NormParams p, int64_t num_tokens, cudaStream_t stream) {
  if (num_tokens <= 0) return;
  with_row_tile(p.hidden, [&](auto threads, auto chunks) {
    launch_kernel(norm_kernel<threads.value, chunks.value, kResidual, kFp8>, static_cast<unsigned>(num_tokens),
                  threads.value, 0, stream, p);
  });
}

bool aligned(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

bool vectorizable(const NormParams& p) {
  return p.hidden % 8 == 0 && aligned(p.h) && aligned(p.a) && aligned(p.b) && aligned(p.x) && aligned(p.out) &&
         aligned(p.out8) && aligned(p.w);
}

}  // namespace

void launch_layer_norm(const LayerNormParams& params, cudaStream_t stream) {
  NormParams p;
  p.h = params.h, p.a = params.a, p.b = params.b, p.x = params.x;
  p.out = params.out, p.out8 = params.out8, p.scales = params.scales, p.w = params.w;
  p.hidden = params.hidden, p.eps = params.eps;
  p.vec = vectorizable(p);
  const bool residual = p.h != nullptr, fp8 = p.out8 != nullptr;
  if (residual && fp8) {
    launch_norm<true, true>(p, params.num_tokens, stream);
  } else if (residual) {
    launch_norm<true, false>(p, params.num_tokens, stream);
  } else if (fp8) {
    launch_norm<false, true>(p, params.num_tokens, stream);
  } else {
    launch_norm<false, false>(p, params.num_tokens, stream);
  }
}

}  // namespace tide::cuda
