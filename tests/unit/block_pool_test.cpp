// BlockPool with one layer group: blocks, refcounts, the cache of released keyed blocks (LRU) and the host
// tier (several groups sharing the arena: block_pool_groups_test.cpp). Pure unit tests: keys are made up,
// copies are compared exactly.
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

// Puts `k` in a cached (refcount 0) device block of `pool`'s group 0, the only free one left when the pool has
// one block.
int32_t cache_key(BlockPool& pool, const BlockKey& k) {
  std::vector<BlockCopy> copies;
  const int32_t b = pool.allocate(0, copies);
  pool.register_key(b, k, std::nullopt);
  pool.release(b);
  return b;
}

// Acquires `keys` of group 0 together.
std::vector<int32_t> acquire_all(BlockPool& pool, const std::vector<BlockKey>& keys, std::vector<BlockCopy>& copies) {
  const BlockPool::GroupKeys request{0, keys};
  return pool.acquire(std::span<const BlockPool::GroupKeys>(&request, 1), copies).front();
}

// ---

TEST(BlockPool, AllocateHandsOutEachBlockOnce) {
  BlockPool pool(4, 0, {0});
  std::vector<BlockCopy> copies;
  std::set<int32_t> got;
  for (int i = 0; i < 4; ++i) {
    got.insert(pool.allocate(0, copies));
    pool.check_invariants();
  }
  EXPECT_EQ(got, (std::set<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(pool.num_free(), 0);
  EXPECT_EQ(pool.num_in_use(), 4);
  EXPECT_THROW(pool.allocate(0, copies), Error);
  pool.release(2);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.allocate(0, copies), 2);
  EXPECT_TRUE(copies.empty());
  pool.check_invariants();
}

TEST(BlockPool, ReleaseOfAFreeBlockThrows) {
  BlockPool pool(2, 0, {0});
  std::vector<BlockCopy> copies;
  const int32_t b = pool.allocate(0, copies);
  pool.release(b);
  EXPECT_THROW(pool.release(b), Error);
  EXPECT_THROW(pool.release(2), Error);
  EXPECT_THROW(pool.release(-1), Error);
  pool.check_invariants();
}

TEST(BlockPool, KeyedBlocksAreEvictedLastAnonymousBlocksFirst) {
  BlockPool pool(4, 0, {0});
  std::vector<BlockCopy> copies;
  const int32_t a = pool.allocate(0, copies), b = pool.allocate(0, copies);
  const int32_t c = pool.allocate(0, copies), d = pool.allocate(0, copies);
  pool.register_key(a, key(1), std::nullopt);
  pool.register_key(b, key(2), std::nullopt);
  pool.release(a);  // keyed: back
  pool.release(c);  // anonymous: front
  pool.release(b);  // keyed: back, after a
  pool.release(d);  // anonymous: front, before c
  pool.check_invariants();
  EXPECT_EQ(pool.group_stats(0).cached_blocks, 2);
  // Free queue: d, c, a, b.
  EXPECT_EQ(pool.allocate(0, copies), d);
  EXPECT_EQ(pool.allocate(0, copies), c);
  EXPECT_TRUE(pool.contains(0, key(1)));
  EXPECT_EQ(pool.allocate(0, copies), a);
  EXPECT_FALSE(pool.contains(0, key(1)));
  EXPECT_TRUE(pool.contains(0, key(2)));
  EXPECT_EQ(pool.allocate(0, copies), b);
  EXPECT_FALSE(pool.contains(0, key(2)));
  EXPECT_TRUE(copies.empty());  // no host tier: evicted keys are forgotten
  EXPECT_EQ(pool.group_stats(0).cached_blocks, 0);
  pool.check_invariants();
}

TEST(BlockPool, CachedBlockIsFoundAndAcquiredFromTheFreeQueue) {
  BlockPool pool(2, 0, {0});
  std::vector<BlockCopy> copies;
  const int32_t a = cache_key(pool, key(7));
  EXPECT_TRUE(pool.on_device(0, key(7)));
  EXPECT_FALSE(pool.on_host(0, key(7)));
  EXPECT_EQ(pool.device_block(0, key(7)), a);
  EXPECT_EQ(pool.device_block(0, key(8)), std::nullopt);
  EXPECT_EQ(pool.num_free(), 2);  // cached blocks are free (evictable)

  EXPECT_EQ(pool.acquire(0, key(7), copies), a);
  EXPECT_EQ(pool.refcount(a), 1);
  EXPECT_EQ(pool.num_free(), 1);
  const int32_t other = pool.allocate(0, copies);
  EXPECT_NE(other, a);
  EXPECT_THROW(pool.allocate(0, copies), Error);  // the acquired block is not evictable
  EXPECT_TRUE(pool.contains(0, key(7)));
  EXPECT_TRUE(copies.empty());
  pool.check_invariants();
}

TEST(BlockPool, TwoReferencesKeepABlockInUseUntilBothAreReleased) {
  BlockPool pool(2, 0, {0});
  std::vector<BlockCopy> copies;
  const int32_t a = cache_key(pool, key(3));
  EXPECT_EQ(pool.acquire(0, key(3), copies), a);
  EXPECT_EQ(pool.acquire(0, key(3), copies), a);
  EXPECT_EQ(pool.refcount(a), 2);
  EXPECT_EQ(pool.num_in_use(), 1);
  pool.check_invariants();
  pool.release(a);
  EXPECT_EQ(pool.refcount(a), 1);
  EXPECT_EQ(pool.num_in_use(), 1);
  EXPECT_EQ(pool.group_stats(0).cached_blocks, 0);
  pool.check_invariants();
  pool.release(a);
  EXPECT_EQ(pool.refcount(a), 0);
  EXPECT_EQ(pool.num_in_use(), 0);
  EXPECT_EQ(pool.group_stats(0).cached_blocks, 1);
  EXPECT_TRUE(pool.on_device(0, key(3)));
  pool.check_invariants();
}

TEST(BlockPool, RegisterKeyIsANoOpWhenAnotherBlockHoldsTheKey) {
  BlockPool pool(2, 0, {0});
  std::vector<BlockCopy> copies;
  const int32_t a = pool.allocate(0, copies), b = pool.allocate(0, copies);
  pool.register_key(a, key(5), std::nullopt);
  pool.register_key(b, key(5), std::nullopt);  // same content computed twice: b stays anonymous
  EXPECT_EQ(pool.device_block(0, key(5)), a);
  pool.check_invariants();
  pool.release(a);  // keyed: back
  pool.release(b);  // anonymous: front
  EXPECT_EQ(pool.group_stats(0).cached_blocks, 1);
  EXPECT_EQ(pool.allocate(0, copies), b);
  EXPECT_TRUE(pool.on_device(0, key(5)));
  EXPECT_EQ(pool.allocate(0, copies), a);
  EXPECT_FALSE(pool.contains(0, key(5)));
  pool.check_invariants();
}

// ---  host tier

TEST(BlockPool, EvictionCopiesTheBlockToTheHostTier) {
  BlockPool pool(1, 2, {0});
  std::vector<BlockCopy> copies;
  const int32_t a = cache_key(pool, key(1));
  EXPECT_EQ(pool.allocate(0, copies), a);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].direction, Dir::kToHost);
  EXPECT_EQ(copies[0].device_block, a);
  EXPECT_FALSE(pool.on_device(0, key(1)));
  EXPECT_TRUE(pool.on_host(0, key(1)));
  EXPECT_TRUE(pool.contains(0, key(1)));
  EXPECT_EQ(pool.group_stats(0).host_blocks, 1);
  EXPECT_EQ(pool.group_stats(0).cached_blocks, 0);
  pool.check_invariants();
}

TEST(BlockPool, AcquireOfAHostKeyCopiesBackAfterTheEvictionItCauses) {
  BlockPool pool(1, 2, {0});
  std::vector<BlockCopy> copies;
  const int32_t a = cache_key(pool, key(1));
  pool.allocate(0, copies);  // key 1 -> host
  ASSERT_EQ(copies.size(), 1u);
  const int32_t slot1 = copies[0].host_block;
  pool.register_key(a, key(2), std::nullopt);
  pool.release(a);  // key 2 cached on the only device block
  copies.clear();

  EXPECT_EQ(pool.acquire(0, key(1), copies), a);
  ASSERT_EQ(copies.size(), 2u);
  const int32_t slot2 = copies[0].host_block;
  EXPECT_NE(slot2, slot1);
  EXPECT_EQ(as_tuples(copies), (std::vector<std::tuple<Dir, int32_t, int32_t>>{{Dir::kToHost, a, slot2},
                                                                              {Dir::kToDevice, a, slot1}}));
  EXPECT_EQ(pool.device_block(0, key(1)), a);
  EXPECT_EQ(pool.refcount(a), 1);
  EXPECT_TRUE(pool.on_host(0, key(1)));  // the host keeps its copy
  EXPECT_TRUE(pool.on_host(0, key(2)));
  EXPECT_FALSE(pool.on_device(0, key(2)));
  pool.check_invariants();
}

TEST(BlockPool, AcquireNeverEvictsIntoTheSlotItReads) {
  // One host slot, holding the key being acquired: the block evicted by the swap-in must not go there.
  BlockPool pool(1, 1, {0});
  std::vector<BlockCopy> copies;
  const int32_t a = cache_key(pool, key(1));
  pool.allocate(0, copies);  // key 1 -> slot 0
  ASSERT_EQ(as_tuples(copies), (std::vector<std::tuple<Dir, int32_t, int32_t>>{{Dir::kToHost, a, 0}}));
  pool.register_key(a, key(2), std::nullopt);
  pool.release(a);
  copies.clear();

  EXPECT_EQ(pool.acquire(0, key(1), copies), a);
  EXPECT_EQ(as_tuples(copies), (std::vector<std::tuple<Dir, int32_t, int32_t>>{{Dir::kToDevice, a, 0}}));
  EXPECT_FALSE(pool.contains(0, key(2)));  // dropped: no slot to go to
  EXPECT_TRUE(pool.on_host(0, key(1)));
  EXPECT_TRUE(pool.on_device(0, key(1)));
  pool.check_invariants();
}

TEST(BlockPool, AcquireOfSeveralHostKeysKeepsEverySlotItReads) {
  // Host full with keys 1 and 2, device full of cached keys 3 and 4: swapping in 1 and 2 evicts 3 and 4,
  // and those evictions must not overwrite a slot before its copy back has been recorded.
  BlockPool pool(2, 2, {0});
  std::vector<BlockCopy> copies;
  std::vector<uint64_t> device(2), host(2);  // which key's content each block / slot holds
  auto run = [&] {
    for (const BlockCopy& c : copies) {
      if (c.direction == Dir::kToHost) host[static_cast<size_t>(c.host_block)] = device[static_cast<size_t>(c.device_block)];
      else device[static_cast<size_t>(c.device_block)] = host[static_cast<size_t>(c.host_block)];
    }
    copies.clear();
  };
  auto fill = [&](uint64_t k0, uint64_t k1) {  // both blocks computed with keys k0, k1, then released
    const int32_t a = pool.allocate(0, copies), b = pool.allocate(0, copies);
    run();
    device[static_cast<size_t>(a)] = k0;
    device[static_cast<size_t>(b)] = k1;
    pool.register_key(a, key(k0), std::nullopt);
    pool.register_key(b, key(k1), std::nullopt);
    pool.release(a);
    pool.release(b);
  };
  fill(1, 2);
  fill(3, 4);  // keys 1 and 2 -> host
  ASSERT_TRUE(pool.on_host(0, key(1)));
  ASSERT_TRUE(pool.on_host(0, key(2)));
  ASSERT_EQ(pool.group_stats(0).host_blocks, 2);

  const std::vector<BlockKey> keys{key(1), key(2)};
  const std::vector<int32_t> blocks = acquire_all(pool, keys, copies);
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_NE(blocks[0], blocks[1]);
  run();
  EXPECT_EQ(device[static_cast<size_t>(blocks[0])], 1u);
  EXPECT_EQ(device[static_cast<size_t>(blocks[1])], 2u);
  EXPECT_EQ(pool.device_block(0, key(1)), blocks[0]);
  EXPECT_EQ(pool.device_block(0, key(2)), blocks[1]);
  EXPECT_FALSE(pool.on_device(0, key(3)));
  EXPECT_FALSE(pool.on_device(0, key(4)));
  pool.check_invariants();
}

TEST(BlockPool, AcquireWithoutRoomForTheCopiesBackChangesNothing) {
  // One block, cached with key 2; key 1 on the host. Acquiring both needs 2 blocks.
  BlockPool pool(1, 2, {0});
  std::vector<BlockCopy> copies;
  const int32_t a = cache_key(pool, key(1));
  pool.allocate(0, copies);  // key 1 -> host
  pool.register_key(a, key(2), std::nullopt);
  pool.release(a);
  copies.clear();
  const std::vector<BlockKey> keys{key(2), key(1)};
  EXPECT_THROW(acquire_all(pool, keys, copies), Error);
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(pool.refcount(a), 0);
  EXPECT_TRUE(pool.on_device(0, key(2)));
  EXPECT_TRUE(pool.on_host(0, key(1)));
  EXPECT_NO_THROW(pool.check_invariants());
}

TEST(BlockPool, EvictionOfAKeyTheHostAlreadyHoldsRecordsNoCopy) {
  BlockPool pool(1, 2, {0});
  std::vector<BlockCopy> copies;
  const int32_t a = cache_key(pool, key(1));
  pool.allocate(0, copies);  // key 1 -> host
  pool.release(a);        // anonymous now
  copies.clear();
  EXPECT_EQ(pool.acquire(0, key(1), copies), a);  // back on the device, still on the host
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].direction, Dir::kToDevice);
  pool.release(a);
  copies.clear();

  EXPECT_EQ(pool.allocate(0, copies), a);  // evicts key 1 again
  EXPECT_TRUE(copies.empty());
  EXPECT_FALSE(pool.on_device(0, key(1)));
  EXPECT_TRUE(pool.on_host(0, key(1)));
  EXPECT_EQ(pool.group_stats(0).host_blocks, 1);
  pool.check_invariants();
}

TEST(BlockPool, HostTierDropsTheLeastRecentlyUsedSlot) {
  BlockPool pool(1, 2, {0});
  std::vector<BlockCopy> copies;
  auto evict_new_key = [&](uint64_t k) {
    const int32_t b = pool.allocate(0, copies);  // evicts whatever the block held
    pool.register_key(b, key(k), std::nullopt);
    pool.release(b);
  };
  evict_new_key(1);
  evict_new_key(2);  // key 1 -> host
  evict_new_key(3);  // key 2 -> host
  copies.clear();
  evict_new_key(4);  // key 3 -> host, which is full: key 1 (oldest) is dropped, its slot reused
  EXPECT_FALSE(pool.contains(0, key(1)));
  EXPECT_TRUE(pool.on_host(0, key(2)));
  EXPECT_TRUE(pool.on_host(0, key(3)));
  ASSERT_EQ(copies.size(), 1u);
  pool.check_invariants();

  // Host LRU: key 2's slot, then key 3's. Acquiring key 2 pins its slot; the eviction of key 4 that the
  // swap-in causes takes the only other slot (key 3's), and key 2's slot becomes the most recently used.
  copies.clear();
  const int32_t b = pool.acquire(0, key(2), copies);
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0].direction, Dir::kToHost);
  EXPECT_EQ(copies[1].direction, Dir::kToDevice);
  EXPECT_NE(copies[0].host_block, copies[1].host_block);
  EXPECT_FALSE(pool.contains(0, key(3)));
  EXPECT_TRUE(pool.on_host(0, key(4)));
  EXPECT_TRUE(pool.on_host(0, key(2)));
  pool.release(b);
  // Host LRU now: key 4's slot, then key 2's (touched by the acquire). Evicting key 2 from the device finds
  // it on the host (no copy, touch), and the next new key drops key 4, the least recently used.
  copies.clear();
  evict_new_key(5);
  EXPECT_TRUE(copies.empty());
  evict_new_key(6);  // key 5 -> host: drops key 4
  EXPECT_FALSE(pool.contains(0, key(4)));
  EXPECT_TRUE(pool.on_host(0, key(2)));
  EXPECT_TRUE(pool.on_host(0, key(5)));
  EXPECT_TRUE(pool.on_device(0, key(6)));
  pool.check_invariants();
}

TEST(BlockPool, AcquireFromHostWithoutAFreeBlockThrowsAndLeavesThePoolConsistent) {
  BlockPool pool(1, 1, {0});
  std::vector<BlockCopy> copies;
  const int32_t a = cache_key(pool, key(1));
  EXPECT_EQ(pool.allocate(0, copies), a);  // key 1 -> host; block a held
  copies.clear();
  EXPECT_THROW(pool.acquire(0, key(1), copies), Error);
  EXPECT_TRUE(copies.empty());
  EXPECT_NO_THROW(pool.check_invariants());
  // The host slot is still usable: once a block is free, the key comes back.
  pool.release(a);
  EXPECT_EQ(pool.acquire(0, key(1), copies), a);
  EXPECT_NO_THROW(pool.check_invariants());
}

// ---  statistics

TEST(BlockPool, StatsCountOccupancyCacheHostAndLookups) {
  BlockPool pool(3, 2, {0});
  std::vector<BlockCopy> copies;
  EXPECT_EQ(pool.stats().capacity_blocks, 3);
  EXPECT_EQ(pool.stats().host_capacity_blocks, 2);
  GroupStats s = pool.group_stats(0);
  EXPECT_EQ(s.in_use_blocks, 0);
  EXPECT_EQ(s.peak_in_use_blocks, 0);

  const int32_t a = pool.allocate(0, copies), b = pool.allocate(0, copies), c = pool.allocate(0, copies);
  pool.register_key(a, key(1), std::nullopt);
  pool.register_key(b, key(2), std::nullopt);
  pool.release(a);
  pool.release(c);
  s = pool.group_stats(0);
  EXPECT_EQ(s.in_use_blocks, 1);
  EXPECT_EQ(s.cached_blocks, 1);  // a; b is keyed but in use
  EXPECT_EQ(s.host_blocks, 0);
  EXPECT_EQ(s.peak_in_use_blocks, 3);

  pool.allocate(0, copies);  // c (anonymous, front)
  pool.allocate(0, copies);  // a: key 1 -> host
  s = pool.group_stats(0);
  EXPECT_EQ(s.in_use_blocks, 3);
  EXPECT_EQ(s.cached_blocks, 0);
  EXPECT_EQ(s.host_blocks, 1);

  pool.count_lookup(0, 5, 2);
  pool.count_lookup(0, 3, 3);
  s = pool.group_stats(0);
  EXPECT_EQ(s.queries, 8);
  EXPECT_EQ(s.hits, 5);
  pool.check_invariants();
}

TEST(BlockPool, NegativeSizesAreRejectedWithTideError) {
  EXPECT_THROW(BlockPool(-1, 0, {0}), Error);
  EXPECT_THROW(BlockPool(1, -1, {0}), Error);
  EXPECT_THROW(BlockPool(1, 0, {}), Error);
  EXPECT_THROW(BlockPool(1, 0, {-1}), Error);
}

}  // namespace
}  // namespace tide
