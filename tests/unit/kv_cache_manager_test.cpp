// KvCacheManager: window-aware tables, out-of-window release, the reuse rule, shared blocks, one arena for every
// group, the host tier.
// No model: KV "contents" are simulated (KvMemory below) so that every test can check what a kernel would
// read, not only which block ids the tables hold.
#include "kv/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"

#include "kv_test_util.h"

namespace tide {
namespace {

using test::Dir;
using test::Tokens;
using namespace test;

// ---  tables, append, commit

TEST(KvCacheManager, TablesAreIndexedByPositionOverBlockSize) {
  KvCacheManager kv(4, {0, 6}, KvArenaSpec{16, 0}, true);
  const Tokens prompt = make_tokens(10, 100);
  SequenceKv seq;
  ASSERT_EQ(kv.admit(seq, prompt), 0);
  int64_t n = 0;
  for (int64_t chunk : {1, 3, 1, 5}) {
    kv.append(seq, chunk);
    for (int p = 0; p < 2; ++p) {
      EXPECT_EQ(static_cast<int64_t>(seq.block_tables[static_cast<size_t>(p)].size()), (n + chunk + 3) / 4);
    }
    kv.commit(seq, std::span<const int32_t>(prompt).subspan(static_cast<size_t>(n), static_cast<size_t>(chunk)));
    n += chunk;
    EXPECT_EQ(seq.num_computed(), n);
    check(kv, {&seq});
  }
  // n = 10: three logical blocks; the sliding group (W = 6: the next token reads 5..10) let go of block 0.
  const auto& global = seq.block_tables[0];
  ASSERT_EQ(global.size(), 3u);
  EXPECT_EQ(std::set<int32_t>(global.begin(), global.end()).size(), 3u);
  EXPECT_EQ(std::count(global.begin(), global.end(), kNullBlock), 0);
  EXPECT_EQ(seq.block_tables[1][0], kNullBlock);
  EXPECT_NE(seq.block_tables[1][1], kNullBlock);
  EXPECT_NE(seq.block_tables[1][2], kNullBlock);
  EXPECT_EQ(kv.pool().group_stats(0).in_use_blocks, 3);
  EXPECT_EQ(kv.pool().group_stats(1).in_use_blocks, 2);
  EXPECT_EQ(kv.pool().num_in_use(), 5);
  EXPECT_EQ(seq.tokens, prompt);
  ASSERT_EQ(seq.block_keys.size(), 2u);
  EXPECT_EQ(seq.block_keys[1], block_key(prompt, 4, 1));
  kv.free(seq);
}

TEST(KvCacheManager, CanAppendIsFalseWhenTheArenaLacksBlocks) {
  // Block size 2, five blocks shared by a sliding group (W = 4) and a global group: a block position costs two.
  KvCacheManager kv(2, {4, 0}, KvArenaSpec{5, 0}, true);
  const Tokens prompt = make_tokens(6, 1);
  SequenceKv a;
  kv.admit(a, prompt);
  EXPECT_TRUE(kv.can_append(a, 4));
  EXPECT_FALSE(kv.can_append(a, 5));  // three positions' blocks in two groups: 6 > 5
  compute(kv, a, head(prompt, 4), 4);
  EXPECT_FALSE(kv.can_append(a, 1));
  EXPECT_THROW(kv.append(a, 1), Error);
  SequenceKv b;
  kv.admit(b, make_tokens(4, 50));
  EXPECT_FALSE(kv.can_append(b, 1));
  check(kv, {&a, &b});
  kv.free(a);
  EXPECT_TRUE(kv.can_append(b, 4));
  EXPECT_FALSE(kv.can_append(b, 5));
  kv.free(b);
  EXPECT_EQ(kv.pool().num_in_use(), 0);
}

TEST(KvCacheManager, CanAppendOnAFreshSequence) {
  KvCacheManager kv(4, {0}, KvArenaSpec{2, 0}, true);
  const SequenceKv fresh;
  EXPECT_TRUE(kv.can_append(fresh, 8));
  EXPECT_FALSE(kv.can_append(fresh, 9));
}

TEST(KvCacheManager, RejectsBadConfiguration) {
  EXPECT_THROW(KvCacheManager(0, {0}, KvArenaSpec{4, 0}, true), Error);
  EXPECT_THROW(KvCacheManager(4, {-1}, KvArenaSpec{4, 0}, true), Error);
  EXPECT_THROW(KvCacheManager(4, {}, KvArenaSpec{4, 0}, true), Error);
  EXPECT_THROW(KvCacheManager(4, {0}, KvArenaSpec{-1, 0}, true), Error);
}

TEST(KvCacheManager, ShortRequestsCanUseTheWholeArena) {
  // What a split of the memory by need for the longest context could not do: a sliding group (W = 4096) and
  // a global group, and many short sequences that together take every block of the arena.
  constexpr int64_t kB = 16;
  KvCacheManager kv(kB, {4096, 0}, KvArenaSpec{800, 0}, true);
  std::vector<SequenceKv> seqs(100);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Tokens prompt = make_tokens(64, static_cast<int32_t>(1000 * i));
    ASSERT_EQ(kv.num_admissible_tokens(prompt, 64), 64) << i;
    run_prompt(kv, seqs[i], prompt, 64);
  }
  EXPECT_EQ(kv.pool().num_free(), 0);
  EXPECT_EQ(kv.pool().group_stats(0).in_use_blocks, 400);
  EXPECT_EQ(kv.pool().group_stats(1).in_use_blocks, 400);
  EXPECT_EQ(kv.num_admissible_tokens(make_tokens(16, 99999), 16), 0);
  std::vector<const SequenceKv*> live;
  for (const SequenceKv& s : seqs) live.push_back(&s);
  check(kv, live);
  // A long-context sequence alone gets the global group what it needs from the same blocks.
  for (SequenceKv& s : seqs) kv.free(s);
  EXPECT_TRUE(kv.fits(8000, 512));
  SequenceKv big;
  run_prompt(kv, big, make_tokens(8000, 7), 512);
  EXPECT_EQ(kv.pool().group_stats(1).in_use_blocks, 500);
  EXPECT_LE(kv.pool().group_stats(0).in_use_blocks, kv.max_blocks_per_sequence(0, 8000, 512));
  kv.free(big);
}

// ---  sliding groups let go of blocks out of the window

class KvCacheWindow : public testing::TestWithParam<int64_t> {};

// Block size 4; the window is smaller than a block, equal to it, or larger; tokens one at a time and in chunks.
TEST_P(KvCacheWindow, SlidingGroupReleasesBlocksWhollyBeforeTheWindow) {
  const int64_t w = GetParam();
  constexpr int64_t kB = 4;
  for (int64_t chunk : {1, 3, 7}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    KvCacheManager kv(kB, {w, 0}, KvArenaSpec{64, 0}, true);
    const Tokens prompt = make_tokens(41, 7);
    SequenceKv seq;
    kv.admit(seq, prompt);
    std::vector<int32_t> owned;  // sliding group block ids by logical block, as first allocated
    for (size_t i = 0; i < prompt.size(); i += static_cast<size_t>(chunk)) {
      const int64_t c = std::min<int64_t>(chunk, static_cast<int64_t>(prompt.size() - i));
      kv.append(seq, c);
      for (size_t j = owned.size(); j < seq.block_tables[0].size(); ++j) owned.push_back(seq.block_tables[0][j]);
      kv.commit(seq, std::span<const int32_t>(prompt).subspan(i, static_cast<size_t>(c)));
      check(kv, {&seq});
      const int64_t n = seq.num_computed();
      for (size_t j = 0; j < seq.block_tables[0].size(); ++j) {
        const bool out_of_window = static_cast<int64_t>(j + 1) * kB <= n - w + 1;
        EXPECT_EQ(seq.block_tables[0][j] == kNullBlock, out_of_window) << "n " << n << " block " << j;
        if (out_of_window) {
          EXPECT_EQ(kv.pool().refcount(owned[j]), 0);
          EXPECT_TRUE(kv.pool().on_device(0, block_key(prompt, kB, static_cast<int64_t>(j))));  // cached
        }
        EXPECT_NE(seq.block_tables[1][j], kNullBlock);  // the global group keeps everything
      }
      EXPECT_EQ(kv.pool().group_stats(0).in_use_blocks, num_held(seq, 0));
      EXPECT_EQ(kv.pool().group_stats(1).in_use_blocks, static_cast<int32_t>(seq.block_tables[1].size()));
    }
    kv.free(seq);
  }
}

INSTANTIATE_TEST_SUITE_P(Windows, KvCacheWindow, testing::Values(1, 3, 4, 10),
                         [](const testing::TestParamInfo<int64_t>& info) { return std::string("W").append(std::to_string(info.param)); });

TEST(KvCacheManager, WindowBoundariesByHand) {
  // Block size 4. After commit with n computed tokens the next token reads [n - W + 1, n].
  struct Case {
    int64_t window, n;
    bool block0_released;
  };
  for (const Case& c : {Case{3, 5, false}, Case{3, 6, true}, Case{4, 6, false}, Case{4, 7, true},
                        Case{10, 12, false}, Case{10, 13, true}, Case{1, 3, false}, Case{1, 4, true}}) {
    KvCacheManager kv(4, {c.window}, KvArenaSpec{8, 0}, true);
    const Tokens prompt = make_tokens(c.n + 1, 3);
    SequenceKv seq;
    kv.admit(seq, prompt);
    compute(kv, seq, head(prompt, c.n), 1);
    EXPECT_EQ(seq.block_tables[0][0] == kNullBlock, c.block0_released) << "W " << c.window << " n " << c.n;
    kv.free(seq);
  }
}

// ---  the reuse rule

TEST(KvCacheManager, ReuseIsTheLargestBlockAlignedPrefixBelowThePromptLength) {
  KvCacheManager kv(4, {0}, KvArenaSpec{32, 0}, true);
  const Tokens a = make_tokens(20, 100);
  SequenceKv seq;
  run_prompt(kv, seq, a, 5);
  kv.free(seq);

  EXPECT_EQ(kv.num_reusable_tokens(a), 16);  // T a multiple of B: L <= T - 1
  EXPECT_EQ(kv.num_reusable_tokens(concat(a, {1})), 20);
  EXPECT_EQ(kv.num_reusable_tokens(concat(head(a, 13), {1, 2, 3})), 12);
  EXPECT_EQ(kv.num_reusable_tokens(concat(head(a, 6), make_tokens(10, 900))), 4);  // differs in block 1
  EXPECT_EQ(kv.num_reusable_tokens(head(a, 5)), 4);
  EXPECT_EQ(kv.num_reusable_tokens(head(a, 4)), 0);  // one block: its last token must be computed
  EXPECT_EQ(kv.num_reusable_tokens(head(a, 3)), 0);  // shorter than a block
  EXPECT_EQ(kv.num_reusable_tokens(Tokens{}), 0);
  Tokens other_start = a;
  other_start[0] = 999;
  EXPECT_EQ(kv.num_reusable_tokens(other_start), 0);

  // admit takes exactly that prefix and the remaining tokens compute on top of it.
  const Tokens b = concat(head(a, 13), {1, 2, 3});
  EXPECT_EQ(kv.admit(seq, b), 12);
  EXPECT_EQ(seq.num_cached_tokens, 12);
  EXPECT_EQ(seq.num_computed(), 12);
  EXPECT_EQ(seq.tokens, head(a, 12));
  compute(kv, seq, Tokens(b.begin() + 12, b.end()), 4);
  EXPECT_EQ(seq.tokens, b);
  check(kv, {&seq});
  kv.free(seq);
}

TEST(KvCacheManager, CachedTokensOfTheFixturePromptsAre48) {
  // The e2e fixture: block size 16, window 16, prompts sharing 49 tokens.
  KvCacheManager kv(16, {16, 0}, KvArenaSpec{128, 0}, true);
  const Tokens shared = make_tokens(49, 1000);
  const Tokens a = concat(shared, make_tokens(30, 5000));
  const Tokens b = concat(shared, make_tokens(17, 7000));
  SequenceKv seq;
  EXPECT_EQ(run_prompt(kv, seq, a, 512), 0);
  kv.free(seq);
  EXPECT_EQ(kv.num_reusable_tokens(b), 48);
  EXPECT_EQ(kv.admit(seq, b), 48);
  EXPECT_EQ(seq.num_cached_tokens, 48);
  kv.free(seq);
}

// Builds the cache state of two tests below: prompt A (24 tokens, blocks 0..5) computed in one chunk with a
// sliding group of W = 8 and a global group (block size 4) in an arena of exactly the 12 blocks it takes,
// then freed. The sliding group let go of blocks 0..3 when the chunk was committed, so they are the least
// recently used; the free queue is s0 s1 s2 s3, then the rest tail first: s5 g5 s4 g4 g3 g2 g1 g0.
struct LostBlocks {
  KvCacheManager kv{4, {8, 0}, KvArenaSpec{12, 0}, true};
  Tokens a = make_tokens(24, 300);

  LostBlocks() {
    SequenceKv seq;
    run_prompt(kv, seq, a, 24);
    kv.free(seq);
  }
  bool sliding_has(int64_t j) const { return kv.pool().contains(0, block_key(a, 4, j)); }
  bool global_has(int64_t j) const { return kv.pool().contains(1, block_key(a, 4, j)); }
};

TEST(KvCacheManager, SlidingGroupThatLostEarlyBlocksStillServesTheWholePrefix) {
  LostBlocks s;
  // An unrelated sequence takes 4 blocks: the sliding group's blocks 0..3, which left the window first.
  SequenceKv x;
  run_prompt(s.kv, x, make_tokens(8, 9000), 8);
  for (int64_t j = 0; j < 4; ++j) ASSERT_FALSE(s.sliding_has(j)) << j;
  for (int64_t j = 4; j < 6; ++j) ASSERT_TRUE(s.sliding_has(j)) << j;
  for (int64_t j = 0; j < 6; ++j) ASSERT_TRUE(s.global_has(j)) << j;

  // L = 24: tokens 24.. read [17, 24], so the sliding group needs blocks 4 and 5 only.
  const Tokens b = concat(s.a, {1});
  EXPECT_EQ(s.kv.num_reusable_tokens(b), 24);
  s.kv.free(x);
  SequenceKv seq;
  ASSERT_EQ(s.kv.admit(seq, b), 24);
  EXPECT_EQ(seq.block_tables[0], (std::vector<int32_t>{kNullBlock, kNullBlock, kNullBlock, kNullBlock,
                                                       *s.kv.pool().device_block(0, block_key(s.a, 4, 4)),
                                                       *s.kv.pool().device_block(0, block_key(s.a, 4, 5))}));
  EXPECT_EQ(num_held(seq, 1), 6);
  EXPECT_EQ(s.kv.pool().group_stats(0).hits, 2);
  EXPECT_EQ(s.kv.pool().group_stats(1).hits, 6);
  check(s.kv, {&seq});
  s.kv.free(seq);
}

TEST(KvCacheManager, SlidingGroupThatLostABlockInTheLastWindowShrinksReuse) {
  LostBlocks s;
  // C reuses L = 12 (sliding blocks 1 and 2, global 0..2) and computes one token: its block 3 in each group
  // evicts the front of the queue, sliding blocks 0 and 3. Freed, C's anonymous partial blocks go to the
  // front. Then an unrelated 12-token sequence takes 6 blocks: those two, then sliding 5, global 5, sliding
  // 4 and global 4 (tail first; losing a global block drops what lies below it).
  SequenceKv c;
  ASSERT_EQ(run_prompt(s.kv, c, concat(head(s.a, 12), {1}), 8), 12);
  s.kv.free(c);
  SequenceKv x;
  run_prompt(s.kv, x, make_tokens(12, 9000), 12);
  ASSERT_FALSE(s.sliding_has(0));
  ASSERT_TRUE(s.sliding_has(1));
  ASSERT_TRUE(s.sliding_has(2));
  ASSERT_FALSE(s.sliding_has(3));
  ASSERT_FALSE(s.sliding_has(4));
  ASSERT_FALSE(s.sliding_has(5));
  for (int64_t j = 0; j < 4; ++j) ASSERT_TRUE(s.global_has(j)) << j;
  for (int64_t j = 4; j < 6; ++j) ASSERT_FALSE(s.global_has(j)) << j;

  // The global chain allows 16; L = 16 needs sliding blocks 2, 3; L = 12 needs 1, 2.
  const Tokens b = concat(s.a, {1});
  EXPECT_EQ(s.kv.num_reusable_tokens(b), 12);
  s.kv.free(x);
  SequenceKv seq;
  EXPECT_EQ(s.kv.admit(seq, b), 12);
  EXPECT_EQ(num_held(seq, 0), 2);
  EXPECT_EQ(num_held(seq, 1), 3);
  check(s.kv, {&seq});
  s.kv.free(seq);
}

TEST(KvCacheManager, WindowSmallerThanABlockNeedsOnlyTheBlockBeforeL) {
  // W = 2 < B = 4, an arena of 8 blocks: computing A one token at a time takes 6 global blocks and a sliding
  // block per position block, each let go once the next token no longer reads it; the sliding blocks 0..3 are
  // evicted to make room, the global group keeps the whole chain.
  KvCacheManager kv(4, {2, 0}, KvArenaSpec{8, 0}, true);
  const Tokens a = make_tokens(24, 40);
  SequenceKv seq;
  run_prompt(kv, seq, a, 1);
  kv.free(seq);
  for (int64_t j = 0; j < 4; ++j) ASSERT_FALSE(kv.pool().contains(0, block_key(a, 4, j))) << j;
  ASSERT_TRUE(kv.pool().contains(0, block_key(a, 4, 4)));
  ASSERT_TRUE(kv.pool().contains(0, block_key(a, 4, 5)));

  EXPECT_EQ(kv.num_reusable_tokens(concat(a, {1})), 24);             // reads 23..24: block 5
  EXPECT_EQ(kv.num_reusable_tokens(a), 20);                          // T = 24: L <= 23, reads 19..20: block 4
  EXPECT_EQ(kv.num_reusable_tokens(concat(head(a, 22), {1})), 20);   // block 4
  EXPECT_EQ(kv.num_reusable_tokens(concat(head(a, 19), {1})), 0);    // L = 16 needs block 3, 12 block 2, ...

  ASSERT_EQ(kv.admit(seq, concat(a, {1})), 24);
  EXPECT_EQ(num_held(seq, 0), 1);
  EXPECT_EQ(seq.block_tables[0][5], *kv.pool().device_block(0, block_key(a, 4, 5)));
  EXPECT_EQ(num_held(seq, 1), 6);
  kv.free(seq);
}

TEST(KvCacheManager, WithoutPrefixCachingNothingIsReusedOrRegistered) {
  KvCacheManager kv(4, {6, 0}, KvArenaSpec{32, 8}, false);
  const Tokens a = make_tokens(22, 500);
  SequenceKv seq;
  EXPECT_EQ(run_prompt(kv, seq, a, 5), 0);
  kv.free(seq);
  for (int g = 0; g < 2; ++g) {
    for (int64_t j = 0; j < 5; ++j) EXPECT_FALSE(kv.pool().contains(g, block_key(a, 4, j)));
    EXPECT_EQ(kv.pool().group_stats(g).cached_blocks, 0);
  }
  EXPECT_EQ(kv.num_reusable_tokens(a), 0);
  EXPECT_EQ(kv.admit(seq, a), 0);
  EXPECT_EQ(seq.num_cached_tokens, 0);
  for (int g = 0; g < 2; ++g) {
    EXPECT_EQ(kv.pool().group_stats(g).queries, 0);
    EXPECT_EQ(kv.pool().group_stats(g).hits, 0);
  }
  kv.free(seq);
}

// ---  sharing, free

TEST(KvCacheManager, SequencesOnTheSamePrefixShareBlocksAndWriteOnlyNewOnes) {
  KvCacheManager kv(4, {6, 0}, KvArenaSpec{32, 0}, true);
  KvMemory mem(kv);
  const Tokens a = make_tokens(20, 100);
  const auto a_values = prefix_hashes(a);
  SequenceKv sa;
  ASSERT_EQ(kv.admit(sa, a), 0);
  for (int64_t n = 0; n < 20; n += 5) ASSERT_TRUE(step(kv, mem, sa, a, a_values, 5));
  const int32_t sliding_block2 = *kv.pool().device_block(0, block_key(a, 4, 2));  // released by A, cached

  const Tokens b = concat(head(a, 16), {7, 8, 9});
  const auto b_values = prefix_hashes(b);
  SequenceKv sb;
  ASSERT_EQ(kv.admit(sb, b), 16);
  for (size_t j = 0; j < 4; ++j) {
    EXPECT_EQ(sb.block_tables[1][j], sa.block_tables[1][j]);
    EXPECT_EQ(kv.pool().refcount(sb.block_tables[1][j]), 2);
  }
  // Sliding (W = 6): tokens 16.. read from 11 on, blocks 2 and 3; A still holds 3 and 4.
  EXPECT_EQ(sb.block_tables[0], (std::vector<int32_t>{kNullBlock, kNullBlock, sliding_block2, sa.block_tables[0][3]}));
  EXPECT_EQ(kv.pool().refcount(sliding_block2), 1);
  EXPECT_EQ(kv.pool().refcount(sa.block_tables[0][3]), 2);
  check(kv, {&sa, &sb});

  // B writes positions 16..18 into a new block of each group (step() checks refcount 1), and reads A's.
  ASSERT_TRUE(step(kv, mem, sb, b, b_values, 3));
  for (int g = 0; g < 2; ++g) {
    const int32_t fresh = sb.block_tables[static_cast<size_t>(g)][4];
    EXPECT_EQ(std::count(sa.block_tables[static_cast<size_t>(g)].begin(), sa.block_tables[static_cast<size_t>(g)].end(), fresh), 0);
  }
  // A's content is untouched.
  EXPECT_TRUE(mem.holds(sa, 1, 0, 20, a_values));
  EXPECT_TRUE(mem.holds(sa, 0, 12, 20, a_values));

  // A third sequence on the same prompt while both run.
  SequenceKv sc;
  ASSERT_EQ(kv.admit(sc, b), 16);
  EXPECT_EQ(kv.pool().refcount(sa.block_tables[1][0]), 3);
  ASSERT_TRUE(step(kv, mem, sc, b, b_values, 3));
  check(kv, {&sa, &sb, &sc});
  kv.free(sa);
  kv.free(sb);
  kv.free(sc);
  EXPECT_EQ(kv.pool().num_in_use(), 0);
}

TEST(KvCacheManager, FreeReleasesEverythingAndKeyedBlocksStayCached) {
  KvCacheManager kv(4, {6, 0}, KvArenaSpec{32, 0}, true);
  const Tokens a = make_tokens(22, 100);
  SequenceKv seq;
  run_prompt(kv, seq, a, 5);
  kv.free(seq);
  EXPECT_TRUE(seq.block_tables.empty());
  EXPECT_TRUE(seq.tokens.empty());
  EXPECT_TRUE(seq.block_keys.empty());
  EXPECT_EQ(kv.pool().num_in_use(), 0);
  for (int g = 0; g < 2; ++g) {
    EXPECT_EQ(kv.pool().group_stats(g).in_use_blocks, 0);
    EXPECT_EQ(kv.pool().group_stats(g).cached_blocks, 5);  // the 5 full blocks; the partial sixth is anonymous
    EXPECT_EQ(kv.pool().group_stats(g).peak_in_use_blocks, g == 0 ? 3 : 6);
  }
  check(kv, {});

  // Lookups accumulate over admissions: the first one (cold) looked up the same blocks and hit none.
  ASSERT_EQ(kv.admit(seq, a), 20);
  EXPECT_EQ(kv.pool().group_stats(1).queries, 2 * 5);
  EXPECT_EQ(kv.pool().group_stats(1).hits, 5);
  EXPECT_EQ(kv.pool().group_stats(0).queries, 2 * 2);  // tokens 20.. read from 15: blocks 3 and 4
  EXPECT_EQ(kv.pool().group_stats(0).hits, 2);
  kv.free(seq);
}

}  // namespace
}  // namespace tide
