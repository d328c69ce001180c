// Which key tiles a prefill attention CTA visits and which of them it must mask, and the persistent wgmma
// kernel's work items, shared by the tensor-core prefill kernels (prefill_attention.cuh, wgmma_attention.cu)
// and compiled on the host for the unit tests.
//
// A CTA serves the rows of consecutive new tokens at positions [pos_first, pos_max] of one sequence. A row at
// position p sees keys [p - window + 1, p] (window 0: [0, p]). Key tiles start at multiples of the tile size in
// absolute positions, wherever the row tile starts: a row then meets the same tiles in the same order however
// its sequence was cut into chunks (tiles wholly masked for a row leave its state exactly unchanged), so a
// prompt gives the same outputs with or without a reused prefix. Plain C++17.
#pragma once

#include "backend/attention_window.h"
#include "core/host_device.h"

namespace tide::cuda {

struct PrefillTiles {
  int first_read;  // the first key any row of the CTA sees (keys before it are never read)
  int key_lo;      // the first tile's first key: first_read rounded down to a multiple of the tile size
  int num_tiles;   // tiles [key_lo, key_lo + num_tiles * tile_keys) cover every key any row sees
};

// The first key the row at `pos_first` sees: its window's start (0 without a window or before it fills).
TIDE_HD int prefill_first_read(int pos_first, int window) {
  return window == 0 ? 0 : (pos_first - window + 1 > 0 ? pos_first - window + 1 : 0);
}

TIDE_HD PrefillTiles prefill_tiles(int pos_first, int pos_max, int window, int tile_keys) {
  PrefillTiles t{};
  t.first_read = prefill_first_read(pos_first, window);
  t.key_lo = t.first_read / tile_keys * tile_keys;
  t.num_tiles = (pos_max - t.key_lo) / tile_keys + 1;
  return t;
}

// Whether keys [k0, k0 + keys) hold one that some row of the CTA must not see: past the first row's position,
// or before the last row's window start. Other tiles are seen whole by every row and need no mask.
TIDE_HD bool prefill_needs_mask(int k0, int keys, int pos_first, int pos_max, int window) {
  return k0 + keys - 1 > pos_first || (window != 0 && k0 < pos_max - window + 1);
}

// The blocks of a sequence's table that prefill attention reads, when its new tokens sit at positions
// [pos_first, pos_last]: those holding keys [prefill_first_read(pos_first), pos_last] (every CTA of the
// sequence reads inside that range). Over an FP8 cache the CUDA backend dequantizes
// these blocks into bf16 scratch for the bf16 kernels (kv_fp8.cu).
struct KeyBlocks {
  int first, last;  // table columns [first, last]
};

TIDE_HD KeyBlocks prefill_key_blocks(int pos_first, int pos_last, int window, int block_size) {
  return KeyBlocks{prefill_first_read(pos_first, window) / block_size, pos_last / block_size};
}

// The most blocks prefill_key_blocks gives a sequence of at most `max_seq_tokens` new tokens whose last
// position is at most `max_position`: the host's bound when it sizes the scratch without the positions.
TIDE_HD long long prefill_key_blocks_bound(long long max_position, long long max_seq_tokens, long long window,
                                           long long block_size) {
  const long long global = max_position / block_size + 1;
  if (window == 0) return global;
  // Keys [pos_first - window + 1, pos_last]: at most window + max_seq_tokens - 1 of them, which a range of
  // consecutive keys covers with at most (keys + block_size - 2) / block_size + 1 blocks.
  const long long keys = window + max_seq_tokens - 1;
  const long long windowed = (keys + block_size - 2) / block_size + 1;
  return windowed < global ? windowed : global;
}

// A launch's rows: each listed sequence's new tokens times the query heads of a KV head's group, cut into row
// tiles of `rows` rows from the end, so that rank 0 is a sequence's last row tile (under a causal mask it sees
// the most keys). Every sequence gets `tiles_per_seq` ranks (from the longest); ranks past a shorter
// sequence's rows are empty.
//
// The persistent kernel's work item i is (KV head i % H, then listed sequence, then rank), ranks outermost:
// every sequence's rank 0 and every head of it before any rank 1, so the longest items start first and a CTA
// taking every gridDim.x-th item gets its share of long and short ones.
struct PrefillItem {
  int listed;   // the sequence's index in the launch's list
  int rank;     // its row tile, from the last
  int kv_head;
};

TIDE_HD PrefillItem prefill_item(int item, int num_seqs, int num_heads_kv) {
  PrefillItem t{};
  t.kv_head = item % num_heads_kv;
  const int rest = item / num_heads_kv;
  t.listed = rest % num_seqs;
  t.rank = rest / num_seqs;
  return t;
}

// The persistent kernel's schedule: CTA `cta` of `num_ctas` serves, in its round r = 0, 1, ..., item
// r num_ctas + cta in even rounds and r num_ctas + (num_ctas - 1 - cta) in odd ones: -1 once r num_ctas passes
// the items, num_items where the last round has none for the CTA. Items run from the longest to the shortest (above), so
// taking every num_ctas-th item would give CTA 0 the longest of every round: 6% more key tiles than the average
// at 8K causal tokens of 32/8 heads, 21% at 2K, and the launch lasts as long as its busiest CTA. Running the
// rounds back and forth pairs each round's long items with the next one's short ones: within 0.2% of the
// average there.
TIDE_HD int prefill_scheduled_item(int round, int cta, int num_ctas, int num_items) {
  const long long first = static_cast<long long>(round) * num_ctas;
  if (first >= num_items) return -1;
  const long long item = first + (round % 2 == 0 ? cta : num_ctas - 1 - cta);
  return item < num_items ? static_cast<int>(item) : num_items;  // num_items: this round has none for the CTA
}

// The first row of row tile `rank`: rows [first, first + rows) of the sequence's rows.
TIDE_HD int prefill_rank_row0(int rank, int tiles_per_seq, int rows) { return (tiles_per_seq - 1 - rank) * rows; }

// Whether row tile `rank` of a sequence of `new_tokens` new tokens (`group` rows each) holds no row.
TIDE_HD bool prefill_rank_is_empty(int rank, int tiles_per_seq, int rows, int new_tokens, int group) {
  return prefill_rank_row0(rank, tiles_per_seq, rows) >= new_tokens * group;
}

}  // namespace tide::cuda
