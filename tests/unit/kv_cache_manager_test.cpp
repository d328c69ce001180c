// The simple paged KV cache manager: one pool per layer group, tables indexed by position / block_size,
// all-or-nothing allocation, frees that return every block.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "kv/kv_cache_manager.h"

namespace tide {
namespace {

TEST(BlockPool, AllocatesEachBlockOnceAndRejectsDoubleFree) {
  BlockPool pool(3);
  std::set<int32_t> got{pool.allocate(), pool.allocate(), pool.allocate()};
  EXPECT_EQ(got, (std::set<int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_THROW(pool.allocate(), Error);
  pool.free(1);
  EXPECT_THROW(pool.free(1), Error);
  EXPECT_EQ(pool.allocate(), 1);
}

TEST(KvCacheManager, TablesGrowByBlockInEveryPool) {
  KvCacheManager kv(4, {{16, 10}, {0, 10}});
  SequenceKv seq = kv.create_sequence();
  kv.allocate(seq, 1);
  EXPECT_EQ(seq.block_tables[0].size(), 1u);
  kv.allocate(seq, 4);
  EXPECT_EQ(seq.block_tables[1].size(), 1u);
  kv.allocate(seq, 5);
  EXPECT_EQ(seq.block_tables[0].size(), 2u);
  EXPECT_EQ(seq.block_tables[1].size(), 2u);
  EXPECT_EQ(seq.num_tokens, 5);
  EXPECT_EQ(kv.pool(0).num_in_use(), 2);
  kv.free(seq);
  EXPECT_EQ(kv.pool(0).num_in_use(), 0);
  EXPECT_EQ(kv.pool(1).num_in_use(), 0);
  EXPECT_TRUE(seq.block_tables[0].empty());
}

TEST(KvCacheManager, AllocationIsAllOrNothingAcrossPools) {
  KvCacheManager kv(2, {{4, 3}, {0, 2}});
  SequenceKv a = kv.create_sequence();
  EXPECT_TRUE(kv.can_allocate(a, 4));
  EXPECT_FALSE(kv.can_allocate(a, 5));  // the second pool has only 2 blocks
  EXPECT_THROW(kv.allocate(a, 5), Error);
  EXPECT_EQ(kv.pool(0).num_in_use(), 0);  // nothing taken by the failed call
  kv.allocate(a, 4);
  SequenceKv b = kv.create_sequence();
  EXPECT_FALSE(kv.can_allocate(b, 1));
  kv.free(a);
  EXPECT_TRUE(kv.can_allocate(b, 4));
}

TEST(KvCacheManager, RejectsNonPositiveBlockSize) { EXPECT_THROW(KvCacheManager(0, {{0, 1}}), Error); }

}  // namespace
}  // namespace tide
