// Which key tiles a prefill attention CTA visits and which of them it must mask, shared by the tensor-core
// prefill kernels (prefill_attention.cuh, wgmma_attention.cu) and compiled on the host for the unit tests.
//
// A CTA serves the rows of consecutive new tokens at positions [pos_first, pos_max] of one sequence. A row at
// position p sees keys [p - window + 1, p] (window 0: [0, p]). Key tiles start at multiples of the tile size in
// absolute positions, wherever the row tile starts: a row then meets the same tiles in the same order however
// its sequence was cut into chunks (tiles wholly masked for a row leave its state exactly unchanged), so a
// prompt gives the same outputs with or without a reused prefix. Plain C++17.
#pragma once

#include "core/host_device.h"

namespace tide::cuda {

struct PrefillTiles {
  int first_read;  // the first key any row of the CTA sees (keys before it are never read)
  int key_lo;      // the first tile's first key: first_read rounded down to a multiple of the tile size
  int num_tiles;   // tiles [key_lo, key_lo + num_tiles * tile_keys) cover every key any row sees
};

TIDE_HD PrefillTiles prefill_tiles(int pos_first, int pos_max, int window, int tile_keys) {
  PrefillTiles t{};
  t.first_read = window == 0 ? 0 : (pos_first - window + 1 > 0 ? pos_first - window + 1 : 0);
  t.key_lo = t.first_read / tile_keys * tile_keys;
  t.num_tiles = (pos_max - t.key_lo) / tile_keys + 1;
  return t;
}

// Whether keys [k0, k0 + keys) hold one that some row of the CTA must not see: past the first row's position,
// or before the last row's window start. Other tiles are seen whole by every row and need no mask.
TIDE_HD bool prefill_needs_mask(int k0, int keys, int pos_first, int pos_max, int window) {
  return k0 + keys - 1 > pos_first || (window != 0 && k0 < pos_max - window + 1);
}

}  // namespace tide::cuda
