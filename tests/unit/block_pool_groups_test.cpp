// BlockPool with several layer groups in one arena: one free queue for all, and the keys that can no longer
// form a hit dropped when a key is lost (the same key in groups of the same window; everything below a key
// a global group lost), blocks that could never give a hit not registered, a host tier that keeps no broken
// chain. Pure unit tests: keys are made up, copies are compared exactly.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>
#include <vector>

#include "core/error.h"

#include "block_pool_test_util.h"

namespace tide {
namespace {

using test::as_tuples;
using test::Dir;
using test::key;

TEST(BlockPool, GroupsDrawFromOneFreeQueue) {
  BlockPool pool(4, 0, {8, 0});
  std::vector<BlockCopy> copies;
  std::vector<int32_t> sliding{pool.allocate(0, copies), pool.allocate(0, copies), pool.allocate(0, copies)};
  const int32_t global = pool.allocate(1, copies);
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_EQ(pool.group_stats(0).in_use_blocks, 3);
  EXPECT_EQ(pool.group_stats(1).in_use_blocks, 1);
  EXPECT_EQ(pool.group_of(global), 1);
  EXPECT_THROW(pool.allocate(1, copies), Error);
  pool.check_invariants();
  for (int32_t b : sliding) pool.release(b);
  // The sliding group's memory now serves the global group.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(pool.group_of(pool.allocate(1, copies)), 1);
  EXPECT_EQ(pool.group_stats(0).in_use_blocks, 0);
  EXPECT_EQ(pool.group_stats(0).peak_in_use_blocks, 3);
  EXPECT_EQ(pool.group_stats(1).in_use_blocks, 4);
  EXPECT_EQ(pool.stats().peak_in_use_blocks, 4);
  pool.check_invariants();
}

TEST(BlockPool, AGlobalKeyLostDropsEveryKeyBelowItInEveryGroup) {
  // Chain k1 -> k2 -> k3: the global group (1) holds all three, the sliding group (0) k2 and k3.
  BlockPool pool(5, 0, {8, 0});
  std::vector<BlockCopy> copies;
  const int32_t g1 = pool.allocate(1, copies), g2 = pool.allocate(1, copies), g3 = pool.allocate(1, copies);
  const int32_t s2 = pool.allocate(0, copies), s3 = pool.allocate(0, copies);
  pool.register_key(g1, key(1), std::nullopt);
  pool.register_key(g2, key(2), key(1));
  pool.register_key(g3, key(3), key(2));
  pool.register_key(s2, key(2), key(1));
  pool.register_key(s3, key(3), key(2));
  for (int32_t b : {g1, s3, g3, s2, g2}) pool.release(b);  // free queue: g1 s3 g3 s2 g2
  EXPECT_EQ(pool.group_stats(0).cached_blocks, 2);
  EXPECT_EQ(pool.group_stats(1).cached_blocks, 3);
  pool.check_invariants();

  // Evicting g1 makes every hit through k1 impossible: the keys below it go in both groups, and their blocks
  // are evicted next (front of the free queue), before any block that can still give a hit.
  EXPECT_EQ(pool.allocate(0, copies), g1);
  for (uint64_t k : {1, 2, 3}) {
    EXPECT_FALSE(pool.contains(0, key(k))) << k;
    EXPECT_FALSE(pool.contains(1, key(k))) << k;
  }
  EXPECT_EQ(pool.group_stats(0).cached_blocks, 0);
  EXPECT_EQ(pool.group_stats(1).cached_blocks, 0);
  pool.check_invariants();
  const std::set<int32_t> next{pool.allocate(0, copies), pool.allocate(0, copies), pool.allocate(0, copies),
                               pool.allocate(0, copies)};
  EXPECT_EQ(next, (std::set<int32_t>{g2, g3, s2, s3}));
  EXPECT_TRUE(copies.empty());
  pool.check_invariants();
}

TEST(BlockPool, ASlidingKeyLostGoesInTheGroupsThatShareItsWindow) {
  // Groups 0 and 1 share window 8 (one model window split into two groups); group 2 is global.
  BlockPool pool(3, 0, {8, 8, 0});
  std::vector<BlockCopy> copies;
  const int32_t g = pool.allocate(2, copies), a = pool.allocate(0, copies), b = pool.allocate(1, copies);
  pool.register_key(g, key(1), std::nullopt);
  pool.register_key(a, key(1), std::nullopt);
  pool.register_key(b, key(1), std::nullopt);
  for (int32_t block : {a, b, g}) pool.release(block);  // free queue: a b g
  EXPECT_EQ(pool.allocate(0, copies), a);  // group 0 loses key 1: group 1's copy can no longer form a hit
  EXPECT_FALSE(pool.contains(1, key(1)));
  EXPECT_TRUE(pool.contains(2, key(1)));   // the global key stays: it serves longer hits too
  EXPECT_EQ(pool.allocate(0, copies), b);  // b went to the front
  EXPECT_TRUE(pool.on_device(2, key(1)));
  pool.check_invariants();
}

TEST(BlockPool, BlocksThatCouldNeverGiveAHitAreNotRegistered) {
  BlockPool pool(3, 0, {8, 0});
  std::vector<BlockCopy> copies;
  const int32_t s = pool.allocate(0, copies), g = pool.allocate(1, copies), orphan = pool.allocate(1, copies);
  pool.register_key(s, key(1), std::nullopt);  // the global group does not hold key 1
  EXPECT_FALSE(pool.contains(0, key(1)));
  pool.register_key(orphan, key(3), key(2));   // the global group does not hold its parent
  EXPECT_FALSE(pool.contains(1, key(3)));
  pool.register_key(g, key(1), std::nullopt);
  pool.register_key(s, key(1), std::nullopt);  // global first, then the sliding group
  EXPECT_TRUE(pool.on_device(0, key(1)));
  EXPECT_TRUE(pool.on_device(1, key(1)));
  pool.check_invariants();
}

TEST(BlockPool, TheHostTierKeepsNoBlockWhoseChainIsBroken) {
  // One host slot; k1 -> k2, both global. Evicting k1 fills the slot; evicting k2 needs it, which drops k1,
  // and k2 is then useless: it is forgotten, not copied.
  BlockPool pool(2, 1, {0});
  std::vector<BlockCopy> copies;
  const int32_t a = pool.allocate(0, copies), b = pool.allocate(0, copies);
  pool.register_key(a, key(1), std::nullopt);
  pool.register_key(b, key(2), key(1));
  pool.release(a);
  pool.release(b);
  EXPECT_EQ(pool.allocate(0, copies), a);
  EXPECT_EQ(as_tuples(copies), (std::vector<std::tuple<Dir, int32_t, int32_t>>{{Dir::kToHost, a, 0}}));
  EXPECT_EQ(pool.allocate(0, copies), b);
  EXPECT_EQ(copies.size(), 1u);
  EXPECT_FALSE(pool.contains(0, key(1)));
  EXPECT_FALSE(pool.contains(0, key(2)));
  EXPECT_EQ(pool.stats().host_blocks, 0);
  pool.check_invariants();
}

}  // namespace
}  // namespace tide
