// The stream-K split of the FP8 streaming matmul (backend/stream_k.h), checked by brute force over many grid
// and matrix shapes: every unit has exactly one CTA and owner() finds it; the CTAs of a split tile are
// first_cta .. last_cta; no two split tiles share an arrival counter; a CTA's partial sums for two different
// split tiles never share a slot, and slot() agrees with where the tile lies in the CTA's range.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "backend/stream_k.h"

namespace tide {
namespace {

void check(const StreamKPartition& p) {
  const int64_t units = p.units();
  ASSERT_EQ(p.begin(0), 0);
  ASSERT_EQ(p.begin(p.ctas), units);
  std::vector<int64_t> owner_of(static_cast<size_t>(units), -1);
  for (int64_t c = 0; c < p.ctas; ++c) {
    ASSERT_LT(p.begin(c), p.begin(c + 1)) << "CTA " << c << " has no units";
    for (int64_t u = p.begin(c); u < p.begin(c + 1); ++u) owner_of[static_cast<size_t>(u)] = c;
  }
  for (int64_t u = 0; u < units; ++u) ASSERT_EQ(p.owner(u), owner_of[static_cast<size_t>(u)]) << "unit " << u;

  std::set<int64_t> counters;
  std::map<std::pair<int64_t, int>, int64_t> slot_tile;  // (CTA, slot) -> the split tile kept there
  for (int64_t tile = 0; tile < p.tiles; ++tile) {
    std::set<int64_t> ctas;
    for (int64_t u = tile * p.chunks; u < (tile + 1) * p.chunks; ++u) ctas.insert(owner_of[static_cast<size_t>(u)]);
    ASSERT_EQ(*ctas.begin(), p.first_cta(tile));
    ASSERT_EQ(*ctas.rbegin(), p.last_cta(tile));
    ASSERT_EQ(static_cast<int64_t>(ctas.size()), p.last_cta(tile) - p.first_cta(tile) + 1);
    if (ctas.size() == 1) continue;  // whole in one CTA: written directly
    ASSERT_TRUE(counters.insert(p.first_cta(tile)).second) << "two split tiles count on CTA " << p.first_cta(tile);
    for (const int64_t c : ctas) {
      const int slot = p.slot(c, tile);
      // Slot 0 is for the lowest-numbered tile the CTA touches, found here from the units it owns.
      int64_t lowest_tile = p.tiles;
      for (int64_t u = 0; u < units; ++u) {
        if (owner_of[static_cast<size_t>(u)] == c) lowest_tile = std::min(lowest_tile, u / p.chunks);
      }
      ASSERT_EQ(slot, tile == lowest_tile ? 0 : 1) << "CTA " << c << " tile " << tile;
      const auto [it, fresh] = slot_tile.emplace(std::make_pair(c, slot), tile);
      ASSERT_TRUE(fresh) << "CTA " << c << " keeps tiles " << it->second << " and " << tile << " in slot " << slot;
    }
  }
}

TEST(StreamKPartition, EveryShapeSplitsConsistently) {
  for (int64_t tiles : {1, 2, 3, 7, 16, 50, 256, 257}) {
    for (int64_t chunks : {1, 2, 3, 4, 14}) {
      for (int64_t ctas : {1, 2, 3, 5, 64, 132, 264}) {
        const StreamKPartition p{tiles, chunks, std::min(ctas, tiles * chunks)};  // the launcher's grid
        SCOPED_TRACE(::testing::Message() << "tiles " << tiles << " chunks " << chunks << " ctas " << p.ctas);
        check(p);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// The R7B and Command-A down projections on an H200's grid (two CTAs on each of 132 SMs): many split tiles.
TEST(StreamKPartition, DecodeShapes) {
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{4096, 14336}, {12288, 36864}, {6144, 4096}}) {
    const StreamKPartition p{n / 16, (k + 1023) / 1024, 264};
    SCOPED_TRACE(::testing::Message() << "N " << n << " K " << k);
    check(p);
  }
}

TEST(StreamKPartition, GridTakesWholeTilesWhenTheyBalance) {
  // R7B's and Command-A's down projections on 132 SMs of 2 CTAs: one and three whole tiles per CTA.
  EXPECT_EQ(stream_k_grid(256, 14, 132, 2), 256);
  EXPECT_EQ(stream_k_grid(768, 36, 132, 2), 256);
  EXPECT_EQ(stream_k_grid(500, 14, 132, 2), 250);
  // R7B's and Command-A's qkv: whole tiles balance only at one CTA per SM (3 and 7 tiles per CTA).
  EXPECT_EQ(stream_k_grid(384, 4, 132, 2), 128);
  EXPECT_EQ(stream_k_grid(896, 12, 132, 2), 128);
  EXPECT_EQ(stream_k_grid(384, 4, 132, 1), 128);
  // Whole tiles would leave CTAs far less even (300 tiles: 2 per CTA against 1.14, 3 against 2.27) or uneven
  // (501): split over every slot.
  EXPECT_EQ(stream_k_grid(300, 14, 132, 2), 264);
  EXPECT_EQ(stream_k_grid(501, 14, 132, 2), 264);
  EXPECT_EQ(stream_k_grid(100, 14, 132, 2), 264);
  EXPECT_EQ(stream_k_grid(10, 14, 132, 2), 140);  // fewer units than slots: one each
  for (int64_t tiles : {1, 7, 50, 256, 257, 384, 768}) {
    for (int64_t chunks : {1, 3, 4, 14, 36}) {
      for (int64_t num_sms : {1, 5, 132}) {
        for (int64_t per_sm : {1, 2}) {
          const int64_t slots = num_sms * per_sm, grid = stream_k_grid(tiles, chunks, num_sms, per_sm);
          ASSERT_GE(grid, 1);
          ASSERT_LE(grid, std::min(slots, tiles * chunks));
          const StreamKPartition p{tiles, chunks, grid};
          SCOPED_TRACE(::testing::Message() << "tiles " << tiles << " chunks " << chunks << " slots " << slots);
          check(p);
          if (::testing::Test::HasFatalFailure()) return;
          if (grid < std::min(slots, tiles * chunks)) {  // a whole-tile grid: no tile is split
            for (int64_t c = 0; c <= grid; ++c) ASSERT_EQ(p.begin(c) % chunks, 0) << "CTA " << c;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tide
