// Two KvCacheManagers drawing from one BlockPool (a draft model's KV cache in the model's arena): each keeps
// its own invariants through random admissions, appends, commits, truncations and frees of both; blocks one
// frees serve the other; one manager's cached blocks never serve the other's hits, and keys one loses to
// eviction never drop the other's; a copy of a manager is a snapshot with an arena of its own.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache_manager.h"
#include "kv_test_util.h"

namespace tide {
namespace {

using test::make_tokens;
using test::Tokens;

// Model: a sliding group of window 6 and a global group, 4 positions per block (pool groups 0, 1). Draft:
// the same windows, `draft_block` positions per block (pool groups 2, 3), another extra key.
struct SharedArena {
  std::shared_ptr<BlockPool> pool;
  KvCacheManager model;
  KvCacheManager draft;

  SharedArena(int32_t blocks, int32_t host_blocks, int64_t draft_block)
      : pool(std::make_shared<BlockPool>(blocks, host_blocks, std::vector<int64_t>{6, 0, 6, 0})),
        model(4, {6, 0}, pool, 0, true, 0),
        draft(draft_block, {6, 0}, pool, 2, true, 1) {}
};

void fill(KvCacheManager& kv, SequenceKv& seq, const Tokens& prompt) {
  const int64_t reused = kv.admit(seq, prompt);
  const auto rest = static_cast<int64_t>(prompt.size()) - reused;
  kv.append(seq, rest);
  kv.commit(seq, std::span<const int32_t>(prompt).subspan(static_cast<size_t>(reused)));
}

TEST(KvSharedArena, ManagersKeepTheirInvariantsAndShareFreeBlocks) {
  SharedArena a(64, 16, 8);
  std::mt19937 rng(5);
  const auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  std::vector<SequenceKv> model_seqs(4), draft_seqs(4);
  const std::vector<Tokens> prompts = {make_tokens(21, 1), make_tokens(30, 400), make_tokens(13, 900)};
  for (int round = 0; round < 3000; ++round) {
    const bool on_draft = uniform(0, 1) == 1;
    KvCacheManager& kv = on_draft ? a.draft : a.model;
    std::vector<SequenceKv>& seqs = on_draft ? draft_seqs : model_seqs;
    SequenceKv& seq = seqs[static_cast<size_t>(uniform(0, 3))];
    if (seq.block_tables.empty()) {
      const Tokens& p = prompts[static_cast<size_t>(uniform(0, 2))];
      if (kv.num_admissible_tokens(p, 1) > 0) {
        const int64_t l = kv.admit(seq, p);
        const int64_t c = kv.num_appendable_tokens(seq, static_cast<int64_t>(p.size()) - l);
        if (c > 0) {
          kv.append(seq, c);
          kv.commit(seq, std::span<const int32_t>(p).subspan(static_cast<size_t>(l), static_cast<size_t>(c)));
        }
      }
    } else if (uniform(0, 4) == 0 || kv.num_appendable_tokens(seq, 1) == 0) {
      kv.free(seq);
    } else {
      const int64_t c = kv.num_appendable_tokens(seq, uniform(1, 9));
      kv.append(seq, c);
      if (uniform(0, 5) == 0) {
        kv.truncate(seq);  // a step that did not run
      } else {
        kv.commit(seq, make_tokens(c, static_cast<int32_t>(uniform(0, 99))));
      }
    }
    // Both copy lists are the caller's to run; here nothing reads the memory.
    a.model.take_copies();
    a.draft.take_copies();
    std::vector<const SequenceKv*> model_live, draft_live;
    for (const SequenceKv& s : model_seqs) model_live.push_back(&s);
    for (const SequenceKv& s : draft_seqs) draft_live.push_back(&s);
    ASSERT_NO_THROW(a.model.check_invariants(model_live)) << "round " << round;
    ASSERT_NO_THROW(a.draft.check_invariants(draft_live)) << "round " << round;
    // Every block in use is one of the two managers' groups.
    const int32_t in_use = a.pool->group_stats(0).in_use_blocks + a.pool->group_stats(1).in_use_blocks +
                           a.pool->group_stats(2).in_use_blocks + a.pool->group_stats(3).in_use_blocks;
    ASSERT_EQ(in_use, a.pool->num_in_use());
  }
  for (SequenceKv& s : model_seqs) a.model.free(s);
  for (SequenceKv& s : draft_seqs) a.draft.free(s);
  EXPECT_EQ(a.pool->num_in_use(), 0);
  // What one freed the other can take: the draft alone fills the whole arena.
  SequenceKv big;
  a.draft.admit(big, make_tokens(1, 7));
  EXPECT_EQ(a.draft.num_appendable_tokens(big, 1 << 20), 64 / 2 * 8);
  a.draft.free(big);
}

// The same block size for both, so that only the extra key tells their chains apart.
TEST(KvSharedArena, HitsAndLostKeysStayWithTheirManager) {
  SharedArena a(40, 0, 4);
  const Tokens prompt = make_tokens(33, 50);
  // The draft computes the prompt first, then the model; both free (cached, the draft's older in the LRU).
  SequenceKv d, m;
  fill(a.draft, d, prompt);
  a.draft.free(d);
  EXPECT_EQ(a.model.num_reusable_tokens(prompt), 0);  // the draft's blocks are not the model's
  fill(a.model, m, prompt);
  a.model.free(m);
  EXPECT_EQ(a.model.num_reusable_tokens(prompt), 32);
  EXPECT_EQ(a.draft.num_reusable_tokens(prompt), 32);
  // Taking the draft's cached blocks (the oldest) loses the draft's keys; the model's stay whole.
  const int32_t draft_cached = a.pool->group_stats(2).cached_blocks + a.pool->group_stats(3).cached_blocks;
  ASSERT_GT(draft_cached, 0);
  SequenceKv other;
  a.model.admit(other, make_tokens(1, 3));
  const int32_t untouched = a.pool->num_free() - (a.pool->group_stats(0).cached_blocks + a.pool->group_stats(1).cached_blocks) -
                            draft_cached;
  a.model.append(other, (untouched + draft_cached) / 2 * 4);  // two groups: every free block but the model's cached
  EXPECT_EQ(a.draft.num_reusable_tokens(prompt), 0);
  EXPECT_EQ(a.model.num_reusable_tokens(prompt), 32);
  a.model.free(other);
  a.model.check_invariants({});
  a.draft.check_invariants({});
}

TEST(KvSharedArena, ACopyIsASnapshotWithItsOwnArena) {
  SharedArena a(16, 0, 8);
  KvCacheManager copy = a.model;
  SequenceKv seq;
  fill(copy, seq, make_tokens(20, 5));
  EXPECT_GT(copy.pool().num_in_use(), 0);
  EXPECT_EQ(a.pool->num_in_use(), 0);
  copy.free(seq);
}

TEST(KvSharedArena, GroupsMustMatchThePoolsWindows) {
  const auto pool = std::make_shared<BlockPool>(8, 0, std::vector<int64_t>{6, 0});
  EXPECT_THROW(KvCacheManager(4, {0, 6}, pool, 0, true, 0), Error);
}

}  // namespace
}  // namespace tide
