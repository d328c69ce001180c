// The stream-K split of a matrix over a grid (cuda/fp8_stream_matmul.cu), plain C++ so the host tests check
// the arithmetic the kernel runs: the matrix is `tiles` row tiles of `chunks` units each, numbered tile by
// tile; CTA c of `ctas` takes units [begin(c), begin(c + 1)). A tile one CTA covers whole is written by it; a
// tile split between CTAs first_cta(tile) .. last_cta(tile) has each keep its partial sums in its scratch
// slot for the tile (slot()), and the last to arrive, counted on first_cta(tile)'s counter, adds them in CTA
// order.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TIDE_STREAM_K_HD __host__ __device__ __forceinline__
#else
#define TIDE_STREAM_K_HD inline
#endif

namespace tide {

struct StreamKPartition {
  int64_t tiles, chunks, ctas;  // 1 <= ctas <= tiles * chunks

  TIDE_STREAM_K_HD int64_t units() const { return tiles * chunks; }
  TIDE_STREAM_K_HD int64_t begin(int64_t c) const { return c * units() / ctas; }
  // The CTA whose range holds unit u: the largest c with begin(c) <= u.
  TIDE_STREAM_K_HD int64_t owner(int64_t u) const { return ((u + 1) * ctas - 1) / units(); }
  TIDE_STREAM_K_HD int64_t first_cta(int64_t tile) const { return owner(tile * chunks); }
  TIDE_STREAM_K_HD int64_t last_cta(int64_t tile) const { return owner((tile + 1) * chunks - 1); }
  // Of a CTA's tiles only its first and its last can be split: slot 0 holds the first's partial sums, slot 1
  // the last's (a range inside one tile uses slot 0). A CTA is first_cta of at most one split tile (its last),
  // so first_cta(tile) indexes the tile's arrival counter.
  TIDE_STREAM_K_HD int slot(int64_t c, int64_t tile) const { return tile == begin(c) / chunks ? 0 : 1; }
};

// The grid for `tiles` x `chunks` units on `slots` CTAs that can be resident at once: `slots` CTAs (an even
// split), unless whole tiles per CTA cost at most 1/16 more units per CTA than that. Then fewer CTAs, each
// taking the same number of whole tiles, so no tile is split. A split tile stalls each of its CTAs in the
// middle of its stream for the fix-up (partials, fence, arrival): per-CTA timestamps of R7B's FP8 down
// projection at batch 1 on the H200 showed 4-5 us of a 15-20 us stream there, and 256 CTAs of one tile each
// read the matrix at 2968 GB/s alone against 2488 for 264 split ones (Command-A's down: 768 tiles, 256 CTAs of 3).
inline int64_t stream_k_grid(int64_t tiles, int64_t chunks, int64_t slots) {
  if (tiles * chunks <= slots) return tiles * chunks;
  const int64_t per_cta = (tiles + slots - 1) / slots;  // tiles per CTA with whole tiles
  return tiles % per_cta == 0 && per_cta * slots * 16 <= tiles * 17 ? tiles / per_cta : slots;
}

}  // namespace tide
