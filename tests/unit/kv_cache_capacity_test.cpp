// KvCacheManager::num_appendable_tokens and num_admissible_tokens, the capacity questions a scheduler asks
// before mutating anything: checked against what can_append says and what admit + append actually do (on a
// copy of the manager), in random states of a small arena with shared prefixes, with and without a host tier.
#include <gtest/gtest.h>

#include <random>

#include "kv_test_util.h"

namespace tide {
namespace {

using namespace test;

void check_random_states(uint32_t seed, bool host_tier) {
  std::mt19937 rng(seed);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const int64_t b = uniform(2, 5);
  const int32_t blocks = 48;
  KvCacheManager kv(b, {7, 0}, KvArenaSpec{blocks, host_tier ? blocks : 0}, true);
  const Tokens shared = make_tokens(40, 1000);
  auto random_prompt = [&] {
    Tokens t = head(shared, uniform(1, 40));
    for (int64_t n = uniform(0, 12); n > 0; --n) t.push_back(static_cast<int32_t>(uniform(0, 99)));
    return t;
  };
  std::vector<SequenceKv> live(4);
  for (int round = 0; round < 300; ++round) {
    SequenceKv& seq = live[static_cast<size_t>(uniform(0, 3))];
    // A random live sequence: the largest n <= m with can_append.
    if (!seq.block_tables.empty()) {
      const int64_t m = uniform(1, 30);
      int64_t expected = 0;
      while (expected < m && kv.can_append(seq, expected + 1)) ++expected;
      ASSERT_EQ(kv.num_appendable_tokens(seq, m), expected) << "round " << round;
    }
    // A random prompt: what admit + append would do, tried on a copy.
    const Tokens prompt = random_prompt();
    const int64_t m = uniform(1, 30);
    const int64_t n = kv.num_admissible_tokens(prompt, m);
    KvCacheManager copy = kv;
    SequenceKv trial;
    int64_t reused = -1;
    try {
      reused = copy.admit(trial, prompt);
    } catch (const Error&) {
      ASSERT_EQ(n, 0) << "round " << round << ": admit fails, yet " << n << " tokens admissible";
    }
    if (reused >= 0) {
      const int64_t most = std::min<int64_t>(m, static_cast<int64_t>(prompt.size()) - reused);
      ASSERT_TRUE(n == 0 || copy.can_append(trial, n)) << "round " << round;
      ASSERT_TRUE(n == most || !copy.can_append(trial, n + 1)) << "round " << round << " n " << n;
    }
    // Move the real state on: grow or free a sequence (fills the arena and the cache).
    if (seq.block_tables.empty()) {
      const Tokens p = random_prompt();
      if (kv.num_admissible_tokens(p, 1) > 0) {
        const int64_t l = kv.admit(seq, p);
        const int64_t c = kv.num_appendable_tokens(seq, static_cast<int64_t>(p.size()) - l);
        kv.append(seq, c);
        kv.commit(seq, std::span<const int32_t>(p).subspan(static_cast<size_t>(l), static_cast<size_t>(c)));
      }
    } else if (uniform(0, 2) == 0 || kv.num_appendable_tokens(seq, 1) == 0) {
      kv.free(seq);
    } else {
      const int64_t c = kv.num_appendable_tokens(seq, uniform(1, 6));
      kv.append(seq, c);
      kv.commit(seq, make_tokens(c, static_cast<int32_t>(uniform(0, 99))));
    }
    std::vector<const SequenceKv*> held;
    for (const SequenceKv& s : live) {
      if (!s.block_tables.empty()) held.push_back(&s);
    }
    ASSERT_NO_THROW(check(kv, held));
  }
  for (SequenceKv& s : live) kv.free(s);
}

TEST(KvCacheCapacity, MatchesCanAppendAndAdmit) { check_random_states(21, false); }
TEST(KvCacheCapacity, MatchesCanAppendAndAdmitWithAHostTier) { check_random_states(22, true); }

}  // namespace
}  // namespace tide
