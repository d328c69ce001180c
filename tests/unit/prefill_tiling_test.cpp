// The prefill attention kernels' tile arithmetic (backend/cuda/prefill_tiling.h), on the host, exhaustively over
// small positions, windows, row-tile spans and tile sizes: every key a row sees is in a visited tile and no key
// before the first one any row sees is read; the tiles a row meets do not depend on which row tile it falls in
// (what makes a prompt's outputs independent of its chunking); a tile goes unmasked exactly when every row sees
// all of its keys. The persistent kernel's work items cover every row of every sequence and head exactly once,
// in the order that starts the rows seeing the most keys first, and the schedule's rounds serve each item once
// and share a prompt's key tiles evenly among the CTAs. The blocks an FP8 cache's prefill dequantizes
// hold every key any row tile of the sequence reads, and the host's bound on their count holds and is reached.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backend/cuda/prefill_tiling.h"

namespace tide::cuda {
namespace {

int first_visible(int pos, int window) { return window == 0 ? 0 : std::max(0, pos - window + 1); }

// The starts of the visited tiles whose keys overlap what the row at `pos` sees.
std::vector<int> tiles_met(const PrefillTiles& t, int tile_keys, int pos, int window) {
  std::vector<int> met;
  for (int i = 0; i < t.num_tiles; ++i) {
    const int k0 = t.key_lo + i * tile_keys;
    if (k0 <= pos && k0 + tile_keys - 1 >= first_visible(pos, window)) met.push_back(k0);
  }
  return met;
}

constexpr int kTileSizes[] = {16, 32, 64, 128};
constexpr int kWindows[] = {0, 1, 5, 37, 64, 100, 128, 300};

TEST(PrefillTiling, EveryVisibleKeyIsInAVisitedTileAndNothingBeforeTheWindowIsRead) {
  for (const int tile : kTileSizes) {
    for (const int window : kWindows) {
      for (int pos_first = 0; pos_first < 420; pos_first += 7) {
        for (int span = 1; span <= 70; span += 3) {
          const int pos_max = pos_first + span - 1;
          const PrefillTiles t = prefill_tiles(pos_first, pos_max, window, tile);
          SCOPED_TRACE(testing::Message() << "tile " << tile << " window " << window << " rows " << pos_first << ".."
                                          << pos_max);
          ASSERT_EQ(t.key_lo % tile, 0);
          ASSERT_EQ(t.first_read, first_visible(pos_first, window));
          ASSERT_LE(t.key_lo, t.first_read);
          ASSERT_GT(t.key_lo + tile, t.first_read);                  // the first tile holds the first key read
          ASSERT_GE(t.key_lo + t.num_tiles * tile - 1, pos_max);     // the last tile holds the last row's key
          ASSERT_LE(t.key_lo + (t.num_tiles - 1) * tile, pos_max);   // and no tile lies wholly past it
          for (int pos = pos_first; pos <= pos_max; ++pos) {
            ASSERT_GE(first_visible(pos, window), t.first_read);
          }
        }
      }
    }
  }
}

TEST(PrefillTiling, ARowMeetsTheSameTilesInWhicheverRowTileItFalls) {
  for (const int tile : kTileSizes) {
    for (const int window : kWindows) {
      for (int pos = 0; pos < 400; pos += 5) {
        const std::vector<int> alone = tiles_met(prefill_tiles(pos, pos, window, tile), tile, pos, window);
        for (int before = 0; before <= 40; before += 9) {
          for (int after = 0; after <= 40; after += 11) {
            const int pos_first = std::max(0, pos - before), pos_max = pos + after;
            const PrefillTiles t = prefill_tiles(pos_first, pos_max, window, tile);
            EXPECT_EQ(tiles_met(t, tile, pos, window), alone)
                << "tile " << tile << " window " << window << " row " << pos << " in " << pos_first << ".." << pos_max;
          }
        }
      }
    }
  }
}

TEST(PrefillTiling, ATileGoesUnmaskedExactlyWhenEveryRowSeesAllOfItsKeys) {
  for (const int keys : {16, 32, 128}) {
    for (const int window : kWindows) {
      for (int pos_first = 0; pos_first < 300; pos_first += 13) {
        for (int span = 1; span <= 40; span += 6) {
          const int pos_max = pos_first + span - 1;
          const PrefillTiles t = prefill_tiles(pos_first, pos_max, window, keys);
          for (int k0 = t.key_lo; k0 <= pos_max; k0 += keys) {
            bool every_row_sees_all = true;
            for (int pos = pos_first; pos <= pos_max && every_row_sees_all; ++pos) {
              every_row_sees_all = k0 >= first_visible(pos, window) && k0 + keys - 1 <= pos;
            }
            EXPECT_EQ(prefill_needs_mask(k0, keys, pos_first, pos_max, window), !every_row_sees_all)
                << "keys " << k0 << "+" << keys << " window " << window << " rows " << pos_first << ".." << pos_max;
          }
        }
      }
    }
  }
}

TEST(PrefillTiling, WorkItemsCoverEveryRowOnceTheLastRowTilesFirst) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int rows = trial % 2 == 0 ? 128 : 64;
    const int heads_kv = std::vector<int>{1, 2, 8}[trial % 3];
    const int group = std::vector<int>{1, 4, 12, 3}[(trial / 3) % 4];
    const int num_seqs = 1 + static_cast<int>(rng() % 7);
    std::vector<int> tokens(static_cast<size_t>(num_seqs));
    int longest = 0;
    for (int& t : tokens) {
      t = 1 + static_cast<int>(rng() % (trial % 5 == 0 ? 8 : 700));  // decodes and verify chunks too
      longest = std::max(longest, t);
    }
    const int tiles_per_seq = (longest * group + rows - 1) / rows;  // as the launch computes it
    SCOPED_TRACE(testing::Message() << "trial " << trial << ": " << num_seqs << " sequences, rows " << rows
                                    << ", heads " << heads_kv << " x " << group << ", " << tiles_per_seq
                                    << " row tiles");
    // covered[s][head][row]: how many items computed that row.
    std::vector<std::vector<std::vector<int>>> covered(static_cast<size_t>(num_seqs));
    for (int s = 0; s < num_seqs; ++s) {
      covered[static_cast<size_t>(s)].assign(static_cast<size_t>(heads_kv),
                                             std::vector<int>(static_cast<size_t>(tokens[static_cast<size_t>(s)] * group), 0));
    }
    std::vector<int> seen(static_cast<size_t>(num_seqs * tiles_per_seq * heads_kv), 0);
    int last_row0 = 1 << 30;
    for (int item = 0; item < num_seqs * tiles_per_seq * heads_kv; ++item) {
      const PrefillItem w = prefill_item(item, num_seqs, heads_kv);
      ASSERT_TRUE(w.listed >= 0 && w.listed < num_seqs && w.rank >= 0 && w.rank < tiles_per_seq && w.kv_head >= 0 &&
                  w.kv_head < heads_kv)
          << "item " << item;
      ++seen[static_cast<size_t>((w.listed * tiles_per_seq + w.rank) * heads_kv + w.kv_head)];
      // Items go from the rows furthest into their sequences (seeing the most keys) to the first rows.
      const int row0 = prefill_rank_row0(w.rank, tiles_per_seq, rows);
      ASSERT_LE(row0, last_row0) << "item " << item;
      last_row0 = row0;
      const int n = tokens[static_cast<size_t>(w.listed)] * group;
      ASSERT_EQ(prefill_rank_is_empty(w.rank, tiles_per_seq, rows, tokens[static_cast<size_t>(w.listed)], group), row0 >= n);
      for (int r = row0; r < std::min(n, row0 + rows); ++r) ++covered[static_cast<size_t>(w.listed)][static_cast<size_t>(w.kv_head)][static_cast<size_t>(r)];
    }
    for (int count : seen) ASSERT_EQ(count, 1);
    for (const auto& seq : covered) {
      for (const auto& head : seq) {
        for (int count : head) ASSERT_EQ(count, 1);
      }
    }
    // Rank 0 holds the longest sequence's last row (no item is empty for it).
    const int last_row = longest * group - 1;
    ASSERT_TRUE(prefill_rank_row0(0, tiles_per_seq, rows) <= last_row &&
                last_row < prefill_rank_row0(0, tiles_per_seq, rows) + rows);
  }
}

// Every CTA's rounds of prefill_scheduled_item end, and together they serve every item exactly once.
TEST(PrefillTiling, TheScheduleServesEveryItemOnce) {
  for (const int num_ctas : {1, 2, 7, 132}) {
    for (const int num_items : {1, 2, 6, 7, 8, 131, 132, 133, 264, 265, 1000, 2048}) {
      SCOPED_TRACE(testing::Message() << num_ctas << " CTAs, " << num_items << " items");
      std::vector<int> served(static_cast<size_t>(num_items), 0);
      for (int cta = 0; cta < num_ctas; ++cta) {
        for (int round = 0;; ++round) {
          ASSERT_LE(round, num_items / num_ctas + 1);
          const int item = prefill_scheduled_item(round, cta, num_ctas, num_items);
          if (item < 0) break;
          ASSERT_LE(item, num_items);
          if (item < num_items) ++served[static_cast<size_t>(item)];
        }
      }
      for (int count : served) ASSERT_EQ(count, 1);
    }
  }
}

// One prompt's items as the persistent kernel's launch makes them (128 rows of 128-key tiles, 32 / 8 heads):
// the busiest of 132 CTAs visits within 1% of the average CTA's key tiles at 8K and 32K tokens, causal or with
// a window of 4096, and within one item's tiles of it at 2K. (Taking every 132nd item instead gives the busiest
// 6.3% more than the average at 8K causal.)
TEST(PrefillTiling, TheScheduleSharesAPromptsKeyTilesEvenlyAmongTheCtas) {
  constexpr int kRows = 128, kKeys = 128, kGroup = 4, kHeadsKv = 8, kCtas = 132;
  for (const int tokens : {2048, 8192, 32768}) {
    for (const int window : {0, 4096}) {
      SCOPED_TRACE(testing::Message() << tokens << " tokens, window " << window);
      const int tiles_per_seq = (tokens * kGroup + kRows - 1) / kRows;
      const int num_items = tiles_per_seq * kHeadsKv;
      std::vector<long long> load(kCtas, 0);
      long long total = 0, longest = 0;
      for (int cta = 0; cta < kCtas; ++cta) {
        for (int round = 0;; ++round) {
          const int item = prefill_scheduled_item(round, cta, kCtas, num_items);
          if (item < 0) break;
          if (item == num_items) continue;
          const PrefillItem w = prefill_item(item, 1, kHeadsKv);
          const int row0 = prefill_rank_row0(w.rank, tiles_per_seq, kRows);
          const int pos_first = row0 / kGroup, pos_max = std::min(tokens - 1, (row0 + kRows - 1) / kGroup);
          const int tiles = prefill_tiles(pos_first, pos_max, window, kKeys).num_tiles;
          load[static_cast<size_t>(cta)] += tiles;
          total += tiles;
          longest = std::max<long long>(longest, tiles);
        }
      }
      const double average = static_cast<double>(total) / kCtas;
      const double busiest = static_cast<double>(*std::max_element(load.begin(), load.end()));
      if (tokens >= 8192) {
        EXPECT_LE(busiest, 1.01 * average);
      } else {
        EXPECT_LE(busiest, average + static_cast<double>(longest));
      }
    }
  }
}

// prefill_key_blocks covers every key any row tile of the sequence reads (prefill_tiles per row tile, whatever
// the cut), reads nothing past it, and prefill_key_blocks_bound bounds its count for every sequence the bound's
// arguments allow, reaching it for some.
TEST(PrefillTiling, DequantizedKeyBlocksHoldEveryKeyReadAndTheBoundHolds) {
  for (const int block_size : {1, 3, 5, 16, 64}) {
    for (const int window : kWindows) {
      for (const int max_seq_tokens : {1, 9, 40, 130}) {
        for (const int max_position : {0, 8, 63, 200, 517}) {
          const long long bound = prefill_key_blocks_bound(max_position, max_seq_tokens, window, block_size);
          long long most = 0;
          for (int tokens = 1; tokens <= max_seq_tokens; ++tokens) {
            for (int pos_last = tokens - 1; pos_last <= max_position; ++pos_last) {
              const int pos_first = pos_last - tokens + 1;
              const KeyBlocks kb = prefill_key_blocks(pos_first, pos_last, window, block_size);
              SCOPED_TRACE(testing::Message() << "block " << block_size << " window " << window << " rows "
                                              << pos_first << ".." << pos_last);
              ASSERT_LE(kb.first, kb.last);
              most = std::max<long long>(most, kb.last - kb.first + 1);
              // Any row tile [a, b] of the sequence reads keys [first_read(a), b]: inside the blocks.
              for (int a = pos_first; a <= pos_last; a += 7) {
                const PrefillTiles t = prefill_tiles(a, pos_last, window, 64);
                ASSERT_GE(t.first_read / block_size, kb.first);
              }
              ASSERT_EQ(prefill_tiles(pos_first, pos_last, window, 64).first_read / block_size, kb.first);
              ASSERT_EQ(pos_last / block_size, kb.last);
            }
          }
          ASSERT_LE(most, bound) << "block " << block_size << " window " << window << " tokens " << max_seq_tokens
                                 << " position " << max_position;
          // Reached: globally at the largest position; with a window where a range of window + tokens - 1 keys
          // can start at a block's last key.
          if (window == 0 || max_position >= window + max_seq_tokens + block_size) {
            ASSERT_EQ(most, bound) << "block " << block_size << " window " << window << " tokens " << max_seq_tokens
                                   << " position " << max_position;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tide::cuda
