// The stream-K split of a matrix over a grid (cuda/fp8_stream_matmul.cu), plain C++ so the host tests check
// the arithmetic the kernel runs: the matrix is `tiles` row tiles of `chunks` units each, numbered tile by
// tile; CTA c of `ctas` takes units [begin(c), begin(c + 1)). A tile one CTA covers whole is written by it; a
// tile split between CTAs first_cta(tile) .. last_cta(tile) has each keep its partial sums in its scratch
// slot for the tile (slot()), and the last to arrive, counted on first_cta(tile)'s counter, adds them in CTA
// order.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace tide {

struct StreamKPartition {
  int64_t tiles, chunks, ctas;  // 1 <= ctas <= tiles * chunks

  TIDE_HD int64_t units() const { return tiles * chunks; }
  TIDE_HD int64_t begin(int64_t c) const { return c * units() / ctas; }
  // The CTA whose range holds unit u: the largest c with begin(c) <= u.
  TIDE_HD int64_t owner(int64_t u) const { return ((u + 1) * ctas - 1) / units(); }
  TIDE_HD int64_t first_cta(int64_t tile) const { return owner(tile * chunks); }
  TIDE_HD int64_t last_cta(int64_t tile) const { return owner((tile + 1) * chunks - 1); }
  // Of a CTA's tiles only its first and its last can be split: slot 0 holds the first's partial sums, slot 1
  // the last's (a range inside one tile uses slot 0). A CTA is first_cta of at most one split tile (its last),
  // so first_cta(tile) indexes the tile's arrival counter.
  TIDE_HD int slot(int64_t c, int64_t tile) const { return tile == begin(c) / chunks ? 0 : 1; }
};

// The CTAs of `per_cta` whole tiles each that cover `tiles` on `slots` resident CTAs, if whole tiles cost at
// most 1/16 more units per CTA than an even split on all of them; 0 if not.
inline int64_t whole_tile_grid(int64_t tiles, int64_t slots) {
  const int64_t per_cta = (tiles + slots - 1) / slots;
  return tiles % per_cta == 0 && per_cta * slots * 16 <= tiles * 17 ? tiles / per_cta : 0;
}

// The grid for `tiles` x `chunks` units on `num_sms` SMs that hold up to `ctas_per_sm` CTAs each: CTAs of whole
// tiles where they balance on ctas_per_sm CTAs per SM, or on fewer (whole_tile_grid); else an even split on
// num_sms * ctas_per_sm CTAs. A split tile stalls each of its CTAs in the middle of its stream for the fix-up
// (partials, fence, arrival), a quarter of the stream in per-CTA timestamps of R7B's FP8 down projection at
// batch 1; whole tiles read the matrix faster, also alone (Command-A's down: 768 tiles, 256 CTAs of 3).
// R7B's qkv (384 tiles) balances only at one CTA per SM (128 CTAs of 3), which also leaves it room beside
// gate_up's two per SM in the decode step.
inline int64_t stream_k_grid(int64_t tiles, int64_t chunks, int64_t num_sms, int64_t ctas_per_sm) {
  const int64_t slots = num_sms * ctas_per_sm;
  if (tiles * chunks <= slots) return tiles * chunks;
  for (int64_t per_sm = ctas_per_sm; per_sm >= 1; --per_sm) {
    const int64_t grid = whole_tile_grid(tiles, num_sms * per_sm);
    if (grid > 0) return grid;
  }
  return slots;
}

}  // namespace tide
