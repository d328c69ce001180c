// KvCacheManager: how many blocks a sequence holds (the sizing bound and fits()), and admissions whose
// copies back from the host tier cannot fit or come several at once.
#include "kv_test_util.h"

namespace tide {
namespace {

using namespace test;

// ---  sizing

// Runs one sequence of `num_tokens` in chunks (first chunk `first`, then `chunk`) and returns the most blocks
// of group 0 it held at once.
int64_t observed_max_blocks(int64_t block_size, int64_t window, int64_t num_tokens, int64_t chunk, int64_t first) {
  KvCacheManager kv(block_size, {window}, KvArenaSpec{1000, 0}, true);
  SequenceKv seq;
  const Tokens prompt = make_tokens(num_tokens, 1);
  kv.admit(seq, prompt);
  int64_t most = 0;
  for (int64_t n = 0; n < num_tokens;) {
    const int64_t c = std::min(n == 0 ? first : chunk, num_tokens - n);
    kv.append(seq, c);
    most = std::max(most, num_held(seq, 0));
    kv.commit(seq, std::span<const int32_t>(prompt).subspan(static_cast<size_t>(n), static_cast<size_t>(c)));
    n += c;
  }
  kv.free(seq);
  return most;
}

TEST(KvCacheManager, MaxBlocksPerSequenceByHand) {
  KvCacheManager kv(4, {0, 8, 5, 2}, KvArenaSpec{8, 0}, true);
  EXPECT_EQ(kv.max_blocks_per_sequence(0, 21, 8), 6);  // global: every block
  EXPECT_EQ(kv.max_blocks_per_sequence(1, 100, 1), 3);  // decode reads 8 positions: at most 3 blocks
  EXPECT_EQ(kv.max_blocks_per_sequence(1, 100, 4), 4);  // [s - 7, s + 3]: 11 positions, at most 4 blocks
  EXPECT_EQ(kv.max_blocks_per_sequence(1, 5, 4), 2);    // never more than the sequence has
  // The design's bound for decode: ceil((W - 1) / B) + 1 = 2 for W = 5 (5 positions span at most 2 blocks).
  EXPECT_EQ(kv.max_blocks_per_sequence(2, 100, 1), 2);
  EXPECT_EQ(kv.max_blocks_per_sequence(3, 100, 3), 2);  // [s - 1, s + 2]: 4 positions
  // The arena holds the sum: 21 tokens in chunks of 8 take 6 + 5 + 4 + 3 blocks.
  EXPECT_EQ(kv.max_arena_blocks(21, 8), 18);
  EXPECT_FALSE(kv.fits(21, 8));
  EXPECT_TRUE(KvCacheManager(4, {0, 8, 5, 2}, KvArenaSpec{18, 0}, true).fits(21, 8));
}

// The bound is never below what a sequence holds (unsafe) and never above it (it would reject sequences that
// run: fits() guards every request). The worst case needs every alignment of steps to blocks, which the first
// chunk's sizes 1..chunk give.
TEST(KvCacheManager, MaxBlocksPerSequenceIsTheMostASequenceHolds) {
  constexpr int64_t kTokens = 96;
  std::string unsafe, loose;
  for (int64_t b : {1, 2, 3, 4, 5}) {
    for (int64_t w : {0, 1, 2, 3, 4, 5, 7, 8, 9}) {
      for (int64_t chunk : {1, 2, 3, 7}) {
        KvCacheManager kv(b, {w}, KvArenaSpec{8, 0}, true);
        int64_t most = 0;
        for (int64_t first = 1; first <= chunk; ++first) {
          most = std::max(most, observed_max_blocks(b, w, kTokens, chunk, first));
        }
        const int64_t bound = kv.max_blocks_per_sequence(0, kTokens, chunk);
        const std::string where = " B=" + std::to_string(b) + " W=" + std::to_string(w) + " chunk=" +
                                  std::to_string(chunk) + ": bound " + std::to_string(bound) + ", held " +
                                  std::to_string(most) + "\n";
        if (bound < most) unsafe += where;
        if (bound > most) loose += where;
      }
    }
  }
  EXPECT_TRUE(unsafe.empty()) << "bound below what a sequence holds:\n" << unsafe;
  EXPECT_TRUE(loose.empty()) << "bound above what any sequence holds:\n" << loose;
}

TEST(KvCacheManager, FitsAcceptsExactlyWhatRuns) {
  // B = 4, W = 8, chunks of 4: [s - 7, s + 3] spans at most 4 blocks; the global group holds all 10.
  KvCacheManager tight(4, {8, 0}, KvArenaSpec{14, 0}, true);
  EXPECT_TRUE(tight.fits(40, 4));
  EXPECT_FALSE(tight.fits(41, 4));  // the global group's eleventh block
  KvCacheManager small(4, {8, 0}, KvArenaSpec{13, 0}, true);
  EXPECT_FALSE(small.fits(40, 4));
  SequenceKv seq;
  const Tokens prompt = make_tokens(40, 1);
  tight.admit(seq, prompt);
  for (int64_t n = 0; n < 40; n += 4) {
    ASSERT_TRUE(tight.can_append(seq, 4)) << n;
    compute(tight, seq, Tokens(prompt.begin() + n, prompt.begin() + n + 4), 4);
  }
  tight.free(seq);
}

TEST(KvCacheManager, FitsAcceptsADecodeThatRunsInTheDesignBound) {
  // W = 5, B = 4, one token per step: positions [s - 4, s] span at most 2 blocks (design: ceil(4/4) + 1).
  KvCacheManager kv(4, {5, 0}, KvArenaSpec{17, 0}, true);  // 2 sliding + 15 global blocks
  const Tokens prompt = make_tokens(60, 1);
  SequenceKv seq;
  kv.admit(seq, prompt);
  for (int64_t n = 0; n < 60; ++n) {
    ASSERT_TRUE(kv.can_append(seq, 1)) << n;
    compute(kv, seq, Tokens{prompt[static_cast<size_t>(n)]}, 1);
  }
  kv.free(seq);
  EXPECT_TRUE(kv.fits(60, 1));
}

// ---  host tier

// A failed admit leaves the sequence untouched (it can be admitted again once blocks are free) and takes no
// reference in any group, including the groups processed before the one whose copies back do not fit.
TEST(KvCacheManager, AdmitThatCannotCopyBackThrowsAndChangesNothing) {
  // A sliding group (W = 100) and a global group in 7 blocks, with a host tier.
  KvCacheManager kv(4, {100, 0}, KvArenaSpec{7, 4}, true);
  const Tokens a = make_tokens(8, 10);
  SequenceKv seq;
  run_prompt(kv, seq, a, 8);
  kv.free(seq);
  SequenceKv x;
  run_prompt(kv, x, make_tokens(12, 900), 12);  // takes the 3 unused blocks, then evicts 3 of A's to the host
  ASSERT_TRUE(kv.pool().on_device(1, block_key(a, 4, 0)));
  ASSERT_TRUE(kv.pool().on_host(1, block_key(a, 4, 1)));
  ASSERT_TRUE(kv.pool().on_host(0, block_key(a, 4, 0)));
  ASSERT_TRUE(kv.pool().on_host(0, block_key(a, 4, 1)));
  ASSERT_EQ(kv.take_copies().size(), 3u);
  ASSERT_EQ(kv.pool().num_free(), 1);

  const Tokens b = concat(a, {1});
  EXPECT_EQ(kv.num_reusable_tokens(b), 8);
  EXPECT_EQ(kv.num_admissible_tokens(b, 1), 0);  // the hit takes 4 free blocks: 3 copies back and a cached one
  EXPECT_THROW(kv.admit(seq, b), Error);
  EXPECT_TRUE(seq.block_tables.empty());
  EXPECT_TRUE(seq.tokens.empty());
  EXPECT_EQ(kv.pool().num_in_use(), 6);  // X's blocks only
  EXPECT_TRUE(kv.take_copies().empty());
  EXPECT_NO_THROW(check(kv, {&x}));

  kv.free(x);
  int64_t reused = -1;
  ASSERT_NO_THROW(reused = kv.admit(seq, b));  // the same sequence, once blocks are free
  EXPECT_EQ(reused, 8);
  const std::vector<BlockCopy> copies = kv.take_copies();
  EXPECT_EQ(std::count_if(copies.begin(), copies.end(), [](const BlockCopy& c) { return c.direction == Dir::kToDevice; }), 3);
  check(kv, {&seq});
  kv.free(seq);
}

TEST(KvCacheManager, AdmitWithSeveralHostHitsInOneGroupKeepsThemAll) {
  // 4 device blocks, 2 host slots, block size 4. A (3 blocks) is computed and freed; C (4 blocks) evicts A's
  // blocks 2, 1, 0 to the host, which keeps 1 and 0 and is full. D reuses A's blocks 0 and 1, both on the
  // host: swapping in block 0 evicts one of C's blocks, and that eviction must not take block 1's slot.
  KvCacheManager kv(4, {0}, KvArenaSpec{4, 2}, true);
  KvMemory mem(kv);
  const Tokens a = make_tokens(12, 10), c = make_tokens(16, 500);
  const auto a_values = prefix_hashes(a), c_values = prefix_hashes(c);
  SequenceKv sa, sc, sd;
  kv.admit(sa, a);
  ASSERT_TRUE(step(kv, mem, sa, a, a_values, 12));
  kv.free(sa);
  kv.admit(sc, c);
  ASSERT_TRUE(step(kv, mem, sc, c, c_values, 16));
  kv.free(sc);
  ASSERT_TRUE(kv.pool().on_host(0, block_key(a, 4, 0)));
  ASSERT_TRUE(kv.pool().on_host(0, block_key(a, 4, 1)));
  ASSERT_EQ(kv.pool().group_stats(0).host_blocks, 2);

  const Tokens d = concat(head(a, 8), {1, 2, 3});
  const auto d_values = prefix_hashes(d);
  ASSERT_EQ(kv.num_reusable_tokens(d), 8);
  int64_t reused = -1;
  ASSERT_NO_THROW(reused = kv.admit(sd, d));
  EXPECT_EQ(reused, 8);
  check(kv, {&sd});
  ASSERT_TRUE(step(kv, mem, sd, d, d_values, 3));  // reads positions 0..7 as copied back from the host
  EXPECT_EQ(mem.num_to_device, 2);
  kv.free(sd);
}

}  // namespace
}  // namespace tide
