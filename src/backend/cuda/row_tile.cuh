// One row of bf16 values held in registers by a whole block, for the kernels that make several passes over a
// token's row (layer norm: mean, variance, output; FP8 quantization: amax, codes). The row is read once with
// 16-byte loads, all of a thread's loads in flight together: at decode sizes (one block per token, a handful
// of blocks) these kernels are bound by the latency of their loads, not by bandwidth.
//
// Thread t holds kChunks chunks of 8 consecutive elements, chunk c at element (c * kThreads + t) * 8, so a
// warp's loads of one chunk are contiguous. Elements past the row's end read as 0 and are never written.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "core/fp8.h"

namespace tide::cuda {

template <int kThreads, int kChunks>
struct RowTile {
  uint4 raw[kChunks];  // 8 bf16 each

  __device__ static int64_t index(int c) { return (static_cast<int64_t>(c) * kThreads + threadIdx.x) * 8; }

  __device__ bf16 get(int c, int j) const { return reinterpret_cast<const bf16*>(&raw[c])[j]; }
  __device__ float at(int c, int j) const { return __bfloat162float(get(c, j)); }
  __device__ void set(int c, int j, bf16 v) { reinterpret_cast<bf16*>(&raw[c])[j] = v; }

  // Chunk c of a row of n elements; vec: the row is 16-byte aligned and n a multiple of 8 (else element loads).
  __device__ static uint4 load_chunk(int c, const bf16* row, int64_t n, bool vec) {
    const int64_t i = index(c);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (vec) {
      if (i < n) v = *reinterpret_cast<const uint4*>(row + i);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (i + j < n) reinterpret_cast<bf16*>(&v)[j] = row[i + j];
      }
    }
    return v;
  }

  __device__ void load(const bf16* row, int64_t n, bool vec) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) raw[c] = load_chunk(c, row, n, vec);
  }

  __device__ void store(bf16* row, int64_t n, bool vec) const {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int64_t i = index(c);
      if (vec) {
        if (i < n) *reinterpret_cast<uint4*>(row + i) = raw[c];
      } else {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (i + j < n) row[i + j] = get(c, j);
        }
      }
    }
  }
};

// Whether a row of n bf16 elements starting at p can use 16-byte accesses.
inline bool row_vectorizable(const void* p, int64_t n) {
  return n % 8 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Calls launch(threads, chunks) (integral constants) with the tile shape for rows of n elements: 512 x 1
// (rows up to 4096: R7B's hidden size), 1024 x 2 (up to 16384: Command-A's hidden size, R7B's MLP), else
// 512 x 10 (up to kMaxRowElements = 40960: Command-A's MLP; 1024 x 5 would spill the residual norm's
// registers). At decode sizes these kernels run one block per token on the step's serial path, bound by the
// latency of each thread's chain of loads, divisions and reductions, so few chunks per thread (wider blocks
// of shorter chains shortened the decode step, most at batch 8, against 256 threads x 8 chunks).
template <typename Launch>
void with_row_tile(int64_t n, Launch&& launch) {
  static_assert(kMaxRowElements == 512 * 10 * 8);
  if (n <= 512 * 8) {
    launch(std::integral_constant<int, 512>{}, std::integral_constant<int, 1>{});
  } else if (n <= 1024 * 2 * 8) {
    launch(std::integral_constant<int, 1024>{}, std::integral_constant<int, 2>{});
  } else {
    launch(std::integral_constant<int, 512>{}, std::integral_constant<int, 10>{});
  }
}

// with_row_tile() for kernels over `rows` rows of n elements: from kManyRows rows on (prefill chunks, long
// verify steps), narrower blocks holding more chunks per thread, 256 x 2 (rows up to 4096), 256 x 4 (8192),
// 256 x 8 (16384), so that two or three blocks share an SM and one block's loads run while another reduces and
// writes (one 1024-thread block per SM, 1024 x 2, runs those phases one after the other: R7B's SwiGLU with its
// quantization ran at half the copy bandwidth). Longer rows keep 512 x 10. The tile shape does not change a
// kernel's results.
inline constexpr int64_t kManyRows = 512;
inline constexpr int64_t kManyRowsMaxElements = 256 * 8 * 8;  // the longest row those tiles hold
template <typename Launch>
void with_row_tile(int64_t n, int64_t rows, Launch&& launch) {
  if (rows < kManyRows || n > kManyRowsMaxElements) {
    with_row_tile(n, launch);
  } else if (n <= 256 * 2 * 8) {
    launch(std::integral_constant<int, 256>{}, std::integral_constant<int, 2>{});
  } else if (n <= 256 * 4 * 8) {
    launch(std::integral_constant<int, 256>{}, std::integral_constant<int, 4>{});
  } else {
    launch(std::integral_constant<int, 256>{}, std::integral_constant<int, 8>{});
  }
}

// Eight values (value(j), j < 8, as f32) quantized with `scale`: one rounded division each (as the CPU reference),
// then the hardware's e4m3 conversion: round to nearest even, saturating to +-448, NaN kept (core/fp8.h's
// e4m3_from_float; the quantize test checks the bits).
template <typename Value>
__device__ __forceinline__ void encode_e4m3x8(Value value, float scale, uint8_t (&codes)[8]) {
#pragma unroll
  for (int j = 0; j < 8; j += 2) {
    const __nv_fp8x2_storage_t pair = __nv_cvt_float2_to_fp8x2(
        make_float2(__fdiv_rn(value(j), scale), __fdiv_rn(value(j + 1), scale)), __NV_SATFINITE, __NV_E4M3);
    codes[j] = static_cast<uint8_t>(pair & 0xFF);
    codes[j + 1] = static_cast<uint8_t>(pair >> 8);
  }
}

// Eight codes as one 8-byte store's worth, the first in the lowest byte.
__device__ __forceinline__ uint2 pack_codes8(const uint8_t (&codes)[8]) {
  return uint2{codes[0] | (codes[1] << 8) | (codes[2] << 16) | (static_cast<uint32_t>(codes[3]) << 24),
               codes[4] | (codes[5] << 8) | (codes[6] << 16) | (static_cast<uint32_t>(codes[7]) << 24)};
}

// Writes the n codes of a block's row tile quantized with `scale` (core/fp8.h's arithmetic).
template <int kThreads, int kChunks>
__device__ void quantize_tile_with_scale(const RowTile<kThreads, kChunks>& y, uint8_t* q, float scale, int64_t n,
                                         bool vec) {
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t i = RowTile<kThreads, kChunks>::index(c);
    if (i >= n) break;
    uint8_t codes[8];
    encode_e4m3x8([&](int j) { return y.at(c, j); }, scale, codes);
    if (vec) {
      if (i < n) {
        *reinterpret_cast<uint2*>(q + i) = pack_codes8(codes);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (i + j < n) q[i + j] = codes[j];
      }
    }
  }
}

// Quantizes a block's row tile per token (core/fp8.h: scale = amax / 448, one rounded division, e4m3):
// writes the scale (thread 0) and the n codes. `shared`: kThreads / 32 floats.
template <int kThreads, int kChunks>
__device__ void quantize_tile(const RowTile<kThreads, kChunks>& y, uint8_t* q, float* scale_out, int64_t n, bool vec,
                              float* shared) {
  float amax = 0.0f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (RowTile<kThreads, kChunks>::index(c) >= n) break;  // chunks past the row hold zeros
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(y.at(c, j)));
  }
  const float scale = fp8::scale_for_amax(block_max<kThreads>(amax, shared));
  if (threadIdx.x == 0) *scale_out = scale;
  quantize_tile_with_scale(y, q, scale, n, vec);
}

}  // namespace tide::cuda
