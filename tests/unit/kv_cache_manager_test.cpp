// KvCacheManager: window-aware tables, out-of-window release, the reuse rule, shared blocks, the host tier.
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
  KvCacheManager kv(4, {{0, 8, 0}, {6, 8, 0}}, true);
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
  // n = 10: three logical blocks; the sliding pool (W = 6: the next token reads 5..10) let go of block 0.
  const auto& global = seq.block_tables[0];
  ASSERT_EQ(global.size(), 3u);
  EXPECT_EQ(std::set<int32_t>(global.begin(), global.end()).size(), 3u);
  EXPECT_EQ(std::count(global.begin(), global.end(), kNullBlock), 0);
  EXPECT_EQ(seq.block_tables[1][0], kNullBlock);
  EXPECT_NE(seq.block_tables[1][1], kNullBlock);
  EXPECT_NE(seq.block_tables[1][2], kNullBlock);
  EXPECT_EQ(kv.pool(0).num_in_use(), 3);
  EXPECT_EQ(kv.pool(1).num_in_use(), 2);
  EXPECT_EQ(seq.tokens, prompt);
  ASSERT_EQ(seq.block_keys.size(), 2u);
  EXPECT_EQ(seq.block_keys[1], block_key(prompt, 4, 1));
  kv.free(seq);
}

TEST(KvCacheManager, CanAppendIsFalseWhenAPoolLacksBlocks) {
  KvCacheManager kv(2, {{4, 3, 0}, {0, 2, 0}}, true);
  const Tokens prompt = make_tokens(6, 1);
  SequenceKv a;
  kv.admit(a, prompt);
  EXPECT_TRUE(kv.can_append(a, 4));
  EXPECT_FALSE(kv.can_append(a, 5));  // the global pool has 2 blocks of 2
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
  EXPECT_EQ(kv.pool(0).num_in_use(), 0);
  EXPECT_EQ(kv.pool(1).num_in_use(), 0);
}

TEST(KvCacheManager, CanAppendOnAFreshSequence) {
  KvCacheManager kv(4, {{0, 2, 0}}, true);
  const SequenceKv fresh;
  EXPECT_TRUE(kv.can_append(fresh, 8));
  EXPECT_FALSE(kv.can_append(fresh, 9));
}

TEST(KvCacheManager, RejectsBadConfiguration) {
  EXPECT_THROW(KvCacheManager(0, {{0, 4, 0}}, true), Error);
  EXPECT_THROW(KvCacheManager(4, {{-1, 4, 0}}, true), Error);
}

// ---  sliding pools let go of blocks out of the window

class KvCacheWindow : public testing::TestWithParam<int64_t> {};

// Block size 4; the window is smaller than a block, equal to it, or larger; tokens one at a time and in chunks.
TEST_P(KvCacheWindow, SlidingPoolReleasesBlocksWhollyBeforeTheWindow) {
  const int64_t w = GetParam();
  constexpr int64_t kB = 4;
  for (int64_t chunk : {1, 3, 7}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    KvCacheManager kv(kB, {{w, 32, 0}, {0, 32, 0}}, true);
    const Tokens prompt = make_tokens(41, 7);
    SequenceKv seq;
    kv.admit(seq, prompt);
    std::vector<int32_t> owned;  // sliding pool block ids by logical block, as first allocated
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
          EXPECT_EQ(kv.pool(0).refcount(owned[j]), 0);
          EXPECT_TRUE(kv.pool(0).on_device(block_key(prompt, kB, static_cast<int64_t>(j))));  // cached
        }
        EXPECT_NE(seq.block_tables[1][j], kNullBlock);  // the global pool keeps everything
      }
      EXPECT_EQ(kv.pool(0).num_in_use(), num_held(seq, 0));
      EXPECT_EQ(kv.pool(1).num_in_use(), static_cast<int32_t>(seq.block_tables[1].size()));
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
    KvCacheManager kv(4, {{c.window, 8, 0}}, true);
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
  KvCacheManager kv(4, {{0, 32, 0}}, true);
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
  KvCacheManager kv(16, {{16, 64, 0}, {0, 64, 0}}, true);
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
// sliding pool of W = 8 and 6 blocks (block size 4) and a large global pool, then freed.
struct LostBlocks {
  KvCacheManager kv{4, {{8, 6, 0}, {0, 64, 0}}, true};
  Tokens a = make_tokens(24, 300);

  LostBlocks() {
    SequenceKv seq;
    run_prompt(kv, seq, a, 24);
    kv.free(seq);
  }
  bool sliding_has(int64_t j) const { return kv.pool(0).contains(block_key(a, 4, j)); }
  bool global_has_all() const {
    for (int64_t j = 0; j < 6; ++j)
      if (!kv.pool(1).contains(block_key(a, 4, j))) return false;
    return true;
  }
};

TEST(KvCacheManager, SlidingPoolThatLostEarlyBlocksStillServesTheWholePrefix) {
  LostBlocks s;
  // Blocks 0..3 left the window first, so they are evicted first: an unrelated sequence takes 2 blocks.
  SequenceKv x;
  run_prompt(s.kv, x, make_tokens(8, 9000), 8);
  ASSERT_FALSE(s.sliding_has(0));
  ASSERT_FALSE(s.sliding_has(1));
  for (int64_t j = 2; j < 6; ++j) ASSERT_TRUE(s.sliding_has(j)) << j;
  ASSERT_TRUE(s.global_has_all());

  // L = 24: tokens 24.. read [17, 24], so the sliding pool needs blocks 4 and 5 only.
  const Tokens b = concat(s.a, {1});
  EXPECT_EQ(s.kv.num_reusable_tokens(b), 24);
  SequenceKv seq;
  ASSERT_EQ(s.kv.admit(seq, b), 24);
  EXPECT_EQ(seq.block_tables[0], (std::vector<int32_t>{kNullBlock, kNullBlock, kNullBlock, kNullBlock,
                                                       *s.kv.pool(0).device_block(block_key(s.a, 4, 4)),
                                                       *s.kv.pool(0).device_block(block_key(s.a, 4, 5))}));
  EXPECT_EQ(num_held(seq, 1), 6);
  EXPECT_EQ(s.kv.pool(0).stats().hits, 2);
  EXPECT_EQ(s.kv.pool(1).stats().hits, 6);
  check(s.kv, {&x, &seq});
  s.kv.free(seq);
  s.kv.free(x);
}

TEST(KvCacheManager, SlidingPoolThatLostABlockInTheLastWindowShrinksReuse) {
  LostBlocks s;
  // C hits blocks 1 and 2 in the sliding pool (touching them); then an unrelated sequence evicts the least
  // recently used sliding blocks: 0 (taken by C), 3 and 5.
  SequenceKv c;
  ASSERT_EQ(run_prompt(s.kv, c, concat(head(s.a, 12), {1}), 8), 12);
  s.kv.free(c);
  SequenceKv x;
  run_prompt(s.kv, x, make_tokens(12, 9000), 12);
  ASSERT_FALSE(s.sliding_has(0));
  ASSERT_TRUE(s.sliding_has(1));
  ASSERT_TRUE(s.sliding_has(2));
  ASSERT_FALSE(s.sliding_has(3));
  ASSERT_TRUE(s.sliding_has(4));
  ASSERT_FALSE(s.sliding_has(5));
  ASSERT_TRUE(s.global_has_all());

  // The global chain allows 24; L = 24 needs sliding blocks 4, 5; 20 needs 3, 4; 16 needs 2, 3; 12 needs 1, 2.
  const Tokens b = concat(s.a, {1});
  EXPECT_EQ(s.kv.num_reusable_tokens(b), 12);
  SequenceKv seq;
  EXPECT_EQ(s.kv.admit(seq, b), 12);
  EXPECT_EQ(num_held(seq, 0), 2);
  EXPECT_EQ(num_held(seq, 1), 3);
  check(s.kv, {&x, &seq});
  s.kv.free(seq);
  s.kv.free(x);
}

TEST(KvCacheManager, WindowSmallerThanABlockNeedsOnlyTheBlockBeforeL) {
  // W = 2 < B = 4, a sliding pool of 2 blocks: computing A one token at a time evicts all but its last two
  // blocks (4 and 5) from the sliding pool, while the global pool keeps the whole chain.
  KvCacheManager kv(4, {{2, 2, 0}, {0, 64, 0}}, true);
  const Tokens a = make_tokens(24, 40);
  SequenceKv seq;
  run_prompt(kv, seq, a, 1);
  kv.free(seq);
  for (int64_t j = 0; j < 4; ++j) ASSERT_FALSE(kv.pool(0).contains(block_key(a, 4, j))) << j;
  ASSERT_TRUE(kv.pool(0).contains(block_key(a, 4, 4)));
  ASSERT_TRUE(kv.pool(0).contains(block_key(a, 4, 5)));

  EXPECT_EQ(kv.num_reusable_tokens(concat(a, {1})), 24);             // reads 23..24: block 5
  EXPECT_EQ(kv.num_reusable_tokens(a), 20);                          // T = 24: L <= 23, reads 19..20: block 4
  EXPECT_EQ(kv.num_reusable_tokens(concat(head(a, 22), {1})), 20);   // block 4
  EXPECT_EQ(kv.num_reusable_tokens(concat(head(a, 19), {1})), 0);    // L = 16 needs block 3, 12 block 2, ...

  ASSERT_EQ(kv.admit(seq, concat(a, {1})), 24);
  EXPECT_EQ(num_held(seq, 0), 1);
  EXPECT_EQ(seq.block_tables[0][5], *kv.pool(0).device_block(block_key(a, 4, 5)));
  EXPECT_EQ(num_held(seq, 1), 6);
  kv.free(seq);
}

TEST(KvCacheManager, WithoutPrefixCachingNothingIsReusedOrRegistered) {
  KvCacheManager kv(4, {{6, 16, 4}, {0, 16, 4}}, false);
  const Tokens a = make_tokens(22, 500);
  SequenceKv seq;
  EXPECT_EQ(run_prompt(kv, seq, a, 5), 0);
  kv.free(seq);
  for (int p = 0; p < 2; ++p) {
    for (int64_t j = 0; j < 5; ++j) EXPECT_FALSE(kv.pool(p).contains(block_key(a, 4, j)));
    EXPECT_EQ(kv.pool(p).stats().cached_blocks, 0);
  }
  EXPECT_EQ(kv.num_reusable_tokens(a), 0);
  EXPECT_EQ(kv.admit(seq, a), 0);
  EXPECT_EQ(seq.num_cached_tokens, 0);
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(kv.pool(p).stats().queries, 0);
    EXPECT_EQ(kv.pool(p).stats().hits, 0);
  }
  kv.free(seq);
}

// ---  sharing, free

TEST(KvCacheManager, SequencesOnTheSamePrefixShareBlocksAndWriteOnlyNewOnes) {
  KvCacheManager kv(4, {{6, 16, 0}, {0, 16, 0}}, true);
  KvMemory mem(kv);
  const Tokens a = make_tokens(20, 100);
  const auto a_values = prefix_hashes(a);
  SequenceKv sa;
  ASSERT_EQ(kv.admit(sa, a), 0);
  for (int64_t n = 0; n < 20; n += 5) ASSERT_TRUE(step(kv, mem, sa, a, a_values, 5));
  const int32_t sliding_block2 = *kv.pool(0).device_block(block_key(a, 4, 2));  // released by A, cached

  const Tokens b = concat(head(a, 16), {7, 8, 9});
  const auto b_values = prefix_hashes(b);
  SequenceKv sb;
  ASSERT_EQ(kv.admit(sb, b), 16);
  for (size_t j = 0; j < 4; ++j) {
    EXPECT_EQ(sb.block_tables[1][j], sa.block_tables[1][j]);
    EXPECT_EQ(kv.pool(1).refcount(sb.block_tables[1][j]), 2);
  }
  // Sliding (W = 6): tokens 16.. read from 11 on, blocks 2 and 3; A still holds 3 and 4.
  EXPECT_EQ(sb.block_tables[0], (std::vector<int32_t>{kNullBlock, kNullBlock, sliding_block2, sa.block_tables[0][3]}));
  EXPECT_EQ(kv.pool(0).refcount(sliding_block2), 1);
  EXPECT_EQ(kv.pool(0).refcount(sa.block_tables[0][3]), 2);
  check(kv, {&sa, &sb});

  // B writes positions 16..18 into a new block of each pool (step() checks refcount 1), and reads A's.
  ASSERT_TRUE(step(kv, mem, sb, b, b_values, 3));
  for (int p = 0; p < 2; ++p) {
    const int32_t fresh = sb.block_tables[static_cast<size_t>(p)][4];
    EXPECT_EQ(std::count(sa.block_tables[static_cast<size_t>(p)].begin(), sa.block_tables[static_cast<size_t>(p)].end(), fresh), 0);
  }
  // A's content is untouched.
  EXPECT_TRUE(mem.holds(sa, 1, 0, 20, a_values));
  EXPECT_TRUE(mem.holds(sa, 0, 12, 20, a_values));

  // A third sequence on the same prompt while both run.
  SequenceKv sc;
  ASSERT_EQ(kv.admit(sc, b), 16);
  EXPECT_EQ(kv.pool(1).refcount(sa.block_tables[1][0]), 3);
  ASSERT_TRUE(step(kv, mem, sc, b, b_values, 3));
  check(kv, {&sa, &sb, &sc});
  kv.free(sa);
  kv.free(sb);
  kv.free(sc);
  EXPECT_EQ(kv.pool(0).num_in_use(), 0);
  EXPECT_EQ(kv.pool(1).num_in_use(), 0);
}

TEST(KvCacheManager, FreeReleasesEverythingAndKeyedBlocksStayCached) {
  KvCacheManager kv(4, {{6, 16, 0}, {0, 16, 0}}, true);
  const Tokens a = make_tokens(22, 100);
  SequenceKv seq;
  run_prompt(kv, seq, a, 5);
  kv.free(seq);
  EXPECT_TRUE(seq.block_tables.empty());
  EXPECT_TRUE(seq.tokens.empty());
  EXPECT_TRUE(seq.block_keys.empty());
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(kv.pool(p).num_in_use(), 0);
    EXPECT_EQ(kv.pool(p).stats().cached_blocks, 5);  // the 5 full blocks; the partial sixth is anonymous
    EXPECT_EQ(kv.pool(p).stats().peak_in_use_blocks, p == 0 ? 3 : 6);
  }
  check(kv, {});

  // Lookups accumulate over admissions: the first one (cold) looked up the same blocks and hit none.
  ASSERT_EQ(kv.admit(seq, a), 20);
  EXPECT_EQ(kv.pool(1).stats().queries, 2 * 5);
  EXPECT_EQ(kv.pool(1).stats().hits, 5);
  EXPECT_EQ(kv.pool(0).stats().queries, 2 * 2);  // tokens 20.. read from 15: blocks 3 and 4
  EXPECT_EQ(kv.pool(0).stats().hits, 2);
  kv.free(seq);
}

}  // namespace
}  // namespace tide
