// KvCacheManager, randomised: many sequences on shared prefixes, random chunks and block sizes, a small arena
// with and without a host tier; every position a new token reads must hold the value of the sequence's own
// prefix (reuse never changes what a kernel reads), invariants hold after every step, nothing leaks.
#include "kv_test_util.h"

namespace tide {
namespace {

using namespace test;

// ---  randomised equivalence: reuse never changes what a kernel reads

struct RandomConfig {
  std::string name;
  uint32_t seed;
  int64_t min_block_size, max_block_size;  // drawn from the seed
  std::vector<int64_t> windows;  // one layer group per window (0: global)
  bool host_tier;
  int max_live;  // sequences in flight at once
};

std::ostream& operator<<(std::ostream& os, const RandomConfig& c) { return os << c.name; }

class KvCacheRandomized : public testing::TestWithParam<RandomConfig> {};

struct Live {
  size_t index;  // prompt number, for messages
  Tokens all;    // prompt + decode tokens
  std::vector<uint64_t> values;
  int64_t prompt_len;
  SequenceKv seq;
};

// Many prompts built from a few shared prefixes and random tails, admitted with prefix reuse, computed in
// random chunks, decoded a few tokens, freed; pools small enough to evict constantly. Before each step the
// copy lists are executed on simulated memory, the new positions are written through the tables, and every
// position the new tokens read must hold the value its own prefix gives.
TEST_P(KvCacheRandomized, ReadsEqualTheValuesOfTheSequencesOwnPrefix) {
  const RandomConfig cfg = GetParam();
  std::mt19937 rng(cfg.seed);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int64_t b = uniform(cfg.min_block_size, cfg.max_block_size);
  SCOPED_TRACE("block size " + std::to_string(b));
  const int64_t max_window = *std::max_element(cfg.windows.begin(), cfg.windows.end());
  const int64_t max_prefix = 3 * max_window + 3 * b, max_tail = 2 * max_window + b, max_decode = 4;
  const int64_t max_len = max_prefix + max_tail + max_decode, max_chunk = 2 * b + 5;

  // The arena sized for max_live sequences (an independent bound: [s - W + 1, s + chunk - 1] spans at most
  // ceil((chunk + W - 2) / B) + 1 blocks), so appends never fail; the rest is cache, constantly evicted.
  int64_t need = 0;
  for (int64_t w : cfg.windows) need += w == 0 ? (max_len + b - 1) / b : (max_chunk + w - 2 + b - 1) / b + 1;
  const auto blocks = static_cast<int32_t>(cfg.max_live * need + need / 2 + 1);
  KvCacheManager kv(b, cfg.windows, KvArenaSpec{blocks, cfg.host_tier ? blocks : 0}, true);
  KvMemory mem(kv);

  std::vector<Tokens> prefixes;
  for (int i = 0; i < 4; ++i) {
    Tokens t;
    for (int64_t n = uniform(1, max_prefix); n > 0; --n) t.push_back(static_cast<int32_t>(uniform(0, 999)));
    prefixes.push_back(t);
  }
  constexpr size_t kNumPrompts = 300;
  size_t next_prompt = 0;
  std::vector<Live> live;
  live.reserve(static_cast<size_t>(cfg.max_live));
  int64_t cached_tokens = 0;

  auto live_ptrs = [&] {
    std::vector<const SequenceKv*> out;
    for (const Live& l : live) out.push_back(&l.seq);
    return out;
  };

  while (next_prompt < kNumPrompts || !live.empty()) {
    const bool admit_new = next_prompt < kNumPrompts && static_cast<int>(live.size()) < cfg.max_live &&
                           (live.empty() || uniform(0, 2) == 0);
    if (admit_new) {
      Live l;
      l.index = next_prompt++;
      const int64_t kind = uniform(0, 9);
      if (kind == 0) {  // nothing shared
        for (int64_t n = uniform(1, max_tail); n > 0; --n) l.all.push_back(static_cast<int32_t>(uniform(0, 999)));
      } else {
        const Tokens& prefix = prefixes[static_cast<size_t>(uniform(0, 3))];
        if (kind == 1) {  // a head of a shared prefix (ends anywhere, block-aligned or not)
          l.all = head(prefix, uniform(1, static_cast<int64_t>(prefix.size())));
        } else {
          l.all = prefix;
          for (int64_t n = uniform(0, max_tail); n > 0; --n) l.all.push_back(static_cast<int32_t>(uniform(0, 999)));
        }
      }
      l.prompt_len = static_cast<int64_t>(l.all.size());
      for (int64_t n = uniform(0, max_decode); n > 0; --n) l.all.push_back(static_cast<int32_t>(uniform(0, 999)));
      l.values = prefix_hashes(l.all);

      const Tokens prompt = head(l.all, l.prompt_len);
      const int64_t expected = kv.num_reusable_tokens(prompt);
      // The reuse is maximal: every longer block-aligned L <= T - 1 misses a block some pool needs (global:
      // 0 .. L/B - 1; sliding: those overlapping [L - W + 1, L - 1]).
      const int64_t max_blocks = (l.prompt_len - 1) / b;
      std::vector<BlockKey> keys;
      for (int64_t j = 0; j < max_blocks; ++j) {
        keys.push_back(chain_block_key(j == 0 ? root_block_key(0) : keys.back(),
                                       std::span<const int32_t>(prompt).subspan(static_cast<size_t>(j * b), static_cast<size_t>(b))));
      }
      for (int64_t k = expected / b + 1; k <= max_blocks; ++k) {
        bool served = true;
        for (int g = 0; g < kv.num_groups() && served; ++g) {
          const int64_t w = kv.window(g);
          const int64_t first = w == 0 ? 0 : std::max<int64_t>(0, k * b - w + 1) / b;
          for (int64_t j = first; j < k && served; ++j) served = kv.pool().contains(g, keys[static_cast<size_t>(j)]);
        }
        ASSERT_FALSE(served) << "prompt " << l.index << ": L = " << k * b << " could be reused, got " << expected;
      }
      int64_t reused = -1;
      ASSERT_NO_THROW(reused = kv.admit(l.seq, prompt)) << "prompt " << l.index;
      ASSERT_EQ(reused, expected) << "prompt " << l.index;
      ASSERT_EQ(reused % b, 0);
      ASSERT_LE(reused, l.prompt_len - 1);
      ASSERT_EQ(l.seq.num_computed(), reused);
      cached_tokens += reused;
      live.push_back(std::move(l));
      ASSERT_NO_THROW(check(kv, live_ptrs())) << "after admitting prompt " << live.back().index;
      continue;
    }

    Live& l = live[static_cast<size_t>(uniform(0, static_cast<int64_t>(live.size()) - 1))];
    const int64_t n = l.seq.num_computed();
    const int64_t chunk = n < l.prompt_len ? std::min(uniform(1, max_chunk), l.prompt_len - n) : 1;
    ASSERT_TRUE(step(kv, mem, l.seq, l.all, l.values, chunk)) << "prompt " << l.index << " at " << n;
    const int64_t m = l.seq.num_computed();
    for (int g = 0; g < kv.num_groups(); ++g) {  // out-of-window blocks are let go
      const int64_t w = kv.window(g);
      const auto& table = l.seq.block_tables[static_cast<size_t>(g)];
      for (size_t j = 0; j < table.size(); ++j) {
        const bool out = w != 0 && static_cast<int64_t>(j + 1) * b <= m - w + 1;
        ASSERT_EQ(table[j] == kNullBlock, out) << "prompt " << l.index << " group " << g << " block " << j << " n " << m;
      }
    }
    ASSERT_NO_THROW(check(kv, live_ptrs())) << "prompt " << l.index << " at " << m;
    if (m == static_cast<int64_t>(l.all.size())) {
      kv.free(l.seq);
      live.erase(live.begin() + (&l - live.data()));
      ASSERT_NO_THROW(check(kv, live_ptrs()));
    }
  }

  EXPECT_EQ(kv.pool().num_in_use(), 0);
  for (int g = 0; g < kv.num_groups(); ++g) {
    const GroupStats s = kv.pool().group_stats(g);
    EXPECT_EQ(s.in_use_blocks, 0) << "group " << g;
    EXPECT_GT(s.hits, 0) << "group " << g;
    EXPECT_LE(s.hits, s.queries) << "group " << g;
  }
  EXPECT_GT(cached_tokens, 0);
  if (cfg.host_tier) {
    EXPECT_GT(mem.num_to_host, 0);    // evictions went to the host tier ...
    EXPECT_GT(mem.num_to_device, 0);  // ... and hits were served from it
  } else {
    EXPECT_EQ(mem.num_to_host + mem.num_to_device, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, KvCacheRandomized,
    testing::Values(RandomConfig{"SlidingAndGlobal", 1, 2, 8, {24, 0}, false, 1},
                    RandomConfig{"SlidingAndGlobalHostTier", 2, 2, 8, {20, 0}, true, 1},
                    RandomConfig{"TwoWindowsAndGlobal", 3, 2, 6, {7, 30, 0}, false, 1},
                    RandomConfig{"TwoWindowsAndGlobalHostTier", 4, 2, 6, {7, 30, 0}, true, 1},
                    RandomConfig{"BlockLargerThanWindow", 5, 8, 16, {5, 0}, true, 1},
                    RandomConfig{"BlockLargerThanWindows", 6, 10, 14, {3, 9, 0}, false, 1},
                    RandomConfig{"ConcurrentTwoWindows", 7, 3, 5, {6, 17, 0}, false, 3},
                    RandomConfig{"ConcurrentHostTier", 8, 2, 4, {10, 0}, true, 3},
                    RandomConfig{"BlockSizeOne", 9, 1, 1, {4, 0}, true, 2},
                    RandomConfig{"SiblingGroupsHostTier", 10, 2, 6, {9, 9, 9, 0}, true, 2},
                    RandomConfig{"TwoGlobalGroupsHostTier", 11, 2, 5, {6, 6, 0, 0}, true, 3}),
    [](const testing::TestParamInfo<RandomConfig>& info) { return info.param.name; });


}  // namespace
}  // namespace tide
