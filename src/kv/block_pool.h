// BlockPool: the physical blocks of one layer group's KV pool, with refcounts, the cache of released blocks
// that still hold a registered key (evictable, least recently used first) and an optional host tier that
// evicted blocks are copied to instead of being dropped. Knows nothing about tokens, layers or memory:
// copies are described (BlockCopy) for the caller to execute, in order, before the next forward step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/kv_block.h"
#include "kv/block_key.h"
#include "kv/lru_list.h"

namespace tide {

struct PoolStats {
  int32_t capacity_blocks = 0;
  int32_t in_use_blocks = 0;       // refcount > 0
  int32_t cached_blocks = 0;       // refcount 0, still holding a registered key on the device
  int32_t host_blocks = 0;         // host-tier slots holding a key
  int32_t peak_in_use_blocks = 0;  // since the pool was created
  int64_t queries = 0;             // blocks looked up for prefix reuse
  int64_t hits = 0;                // of those, blocks reused
};

class BlockPool {
 public:
  BlockPool(int32_t num_blocks, int32_t num_host_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(refcount_.size()); }
  // Blocks allocate() can hand out: refcount 0, cached or not.
  int32_t num_free() const { return free_.size(); }
  int32_t num_in_use() const { return num_blocks() - num_free(); }
  int32_t refcount(int32_t block) const { return refcount_[static_cast<size_t>(block)]; }
  // Current statistics (in use, cached and host counts computed now; peak and lookups accumulated).
  PoolStats stats() const;
  void count_lookup(int64_t queries, int64_t hits);

  // Takes the front of the free queue with one reference. A key the block still held is evicted: copied to
  // the host tier (a kToHost copy appended to `copies`) when there is one, else forgotten.
  // Throws tide::Error when no block is free.
  int32_t allocate(std::vector<BlockCopy>& copies);
  // One reference less. At zero the block joins the free queue: at the back (evicted last) when it holds a
  // registered key, at the front when it can never give a hit.
  void release(int32_t block);

  // Whether a device block or a host slot holds `key`. Does not mutate.
  bool contains(const BlockKey& key) const { return on_device(key) || on_host(key); }
  bool on_device(const BlockKey& key) const { return device_.count(key) != 0; }
  // The device block holding `key`, or nullopt.
  std::optional<int32_t> device_block(const BlockKey& key) const {
    const auto it = device_.find(key);
    return it == device_.end() ? std::nullopt : std::optional<int32_t>(it->second);
  }
  bool on_host(const BlockKey& key) const { return host_.count(key) != 0; }
  // Device blocks holding `keys`, one reference taken on each; keys only the host tier has get newly
  // allocated blocks and kToDevice copies appended to `copies` (after any kToHost copies those allocations
  // cause, which never overwrite a slot being read). Touches every block so the LRU order reflects use.
  // Throws tide::Error, changing nothing, when there are not enough free blocks. Precondition: contains()
  // for every key.
  std::vector<int32_t> acquire(std::span<const BlockKey> keys, std::vector<BlockCopy>& copies);
  // Whether acquire(keys) has the free blocks it needs. Does not mutate.
  bool can_acquire(std::span<const BlockKey> keys) const;
  int32_t acquire(const BlockKey& key, std::vector<BlockCopy>& copies) {
    return acquire(std::span<const BlockKey>(&key, 1), copies).front();
  }
  // Makes `block` (full and computed) findable by `key`. No-op when another device block already holds the
  // key (two sequences computed the same content): `block` then stays anonymous.
  void register_key(int32_t block, const BlockKey& key);

  // Checks the pool's internal invariants (refcounts, queue membership, maps); throws on a violation.
  void check_invariants() const;

 private:
  void ref(int32_t block);
  void evict_to_host(int32_t block, const BlockKey& key, std::vector<BlockCopy>& copies);
  void note_in_use() { peak_in_use_ = std::max(peak_in_use_, num_in_use()); }

  std::vector<int32_t> refcount_;
  std::vector<std::optional<BlockKey>> key_of_block_;
  LruList free_;                                          // refcount-0 blocks; front is evicted first
  std::unordered_map<BlockKey, int32_t, BlockKeyHash> device_;  // registered key -> device block

  std::vector<std::optional<BlockKey>> key_of_slot_;      // host tier slots
  std::vector<int32_t> empty_slots_;
  LruList host_lru_;                                      // slots holding a key; front is dropped first
  std::unordered_map<BlockKey, int32_t, BlockKeyHash> host_;

  int32_t peak_in_use_ = 0;
  int64_t queries_ = 0;
  int64_t hits_ = 0;
};

}  // namespace tide
