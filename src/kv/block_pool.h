// BlockPool: the KV memory arena. Every layer group draws blocks of one byte size from one set of device
// blocks and one free queue, so memory goes where the mix of requests needs it (docs/design/kv-cache.md).
// - Refcounts; a block in use belongs to the group that allocated it.
// - Released blocks that hold a registered key (group, key) stay cached, least recently used first in the
//   one free queue shared by all groups; blocks that can never give a hit go to its front.
// - An optional host tier of slots of the same size: evicted keyed blocks are copied there, and hits there
//   are copied back.
// - When a key can no longer be served, the keys that only it made usable are dropped too: the same key in
//   the groups that share its window (they are read for the same hits), and, when a global group lost it,
//   every key below it in every group (a hit needs the global groups' whole chain).
// Knows nothing about tokens, layers or memory: copies are described (BlockCopy) for the caller to execute,
// in order, before the next forward step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/kv_block.h"
#include "kv/block_key.h"
#include "kv/key_tree.h"
#include "kv/lru_list.h"

namespace tide {

// One layer group's share of the arena.
struct GroupStats {
  int32_t in_use_blocks = 0;       // refcount > 0
  int32_t cached_blocks = 0;       // refcount 0, still holding a registered key on the device
  int32_t host_blocks = 0;         // host-tier slots holding a key
  int32_t peak_in_use_blocks = 0;  // since the pool was created
  int64_t queries = 0;             // blocks looked up for prefix reuse
  int64_t hits = 0;                // of those, blocks reused
};

// The arena as a whole.
struct ArenaStats {
  int32_t capacity_blocks = 0;
  int32_t in_use_blocks = 0;
  int32_t cached_blocks = 0;
  int32_t peak_in_use_blocks = 0;
  int32_t host_capacity_blocks = 0;
  int32_t host_blocks = 0;
};

class BlockPool {
 public:
  // group_windows[g]: the window of layer group g (0: global).
  BlockPool(int32_t num_blocks, int32_t num_host_blocks, std::vector<int64_t> group_windows);

  int num_groups() const { return static_cast<int>(windows_.size()); }
  int64_t window(int group) const { return windows_[static_cast<size_t>(group)]; }
  int32_t num_blocks() const { return static_cast<int32_t>(refcount_.size()); }
  int32_t num_host_blocks() const { return static_cast<int32_t>(key_of_slot_.size()); }
  // Blocks allocate() can hand out: refcount 0, cached or not.
  int32_t num_free() const { return free_.size(); }
  int32_t num_in_use() const { return num_blocks() - num_free(); }
  int32_t refcount(int32_t block) const { return refcount_[static_cast<size_t>(block)]; }
  // The group block `block` was allocated for (meaningful while it is in use or cached).
  int group_of(int32_t block) const { return group_[static_cast<size_t>(block)]; }
  GroupStats group_stats(int group) const;
  ArenaStats stats() const;
  void count_lookup(int group, int64_t queries, int64_t hits);

  // Takes the front of the free queue for `group` with one reference. A key the block still held is evicted:
  // copied to the host tier (a kToHost copy appended to `copies`) when there is one, else forgotten (and
  // what only it made usable with it). Throws tide::Error when no block is free.
  int32_t allocate(int group, std::vector<BlockCopy>& copies);
  // One reference less. At zero the block joins the free queue: at the back (evicted last) when it holds a
  // registered key, at the front when it can never give a hit.
  void release(int32_t block);

  // Whether a device block or a host slot holds `key` for `group`. Does not mutate.
  bool contains(int group, const BlockKey& key) const { return on_device(group, key) || on_host(group, key); }
  bool on_device(int group, const BlockKey& key) const { return device_[static_cast<size_t>(group)].count(key) != 0; }
  bool on_host(int group, const BlockKey& key) const { return host_[static_cast<size_t>(group)].count(key) != 0; }
  // The device block holding `key` for `group`, or nullopt.
  std::optional<int32_t> device_block(int group, const BlockKey& key) const {
    const auto& map = device_[static_cast<size_t>(group)];
    const auto it = map.find(key);
    return it == map.end() ? std::nullopt : std::optional<int32_t>(it->second);
  }

  // Keys of one group to acquire together with other groups' (acquire below).
  struct GroupKeys {
    int group = 0;
    std::span<const BlockKey> keys;
  };
  // Device blocks holding every group's keys, one reference taken on each; keys only the host tier has get
  // newly allocated blocks and kToDevice copies appended to `copies` (after any kToHost copies those
  // allocations cause, which never overwrite a slot being read nor evict a block being acquired). Touches
  // every block, so the LRU order reflects use. Returns the blocks per entry of `request`, in order. Throws
  // tide::Error, changing nothing, when there are not enough free blocks. Precondition: contains() for every
  // key.
  std::vector<std::vector<int32_t>> acquire(std::span<const GroupKeys> request, std::vector<BlockCopy>& copies);
  // Whether acquire(request) has the free blocks it needs. Does not mutate.
  bool can_acquire(std::span<const GroupKeys> request) const;
  // Free blocks acquire(request) takes: cached device hits leave the free queue, host hits each need one.
  int32_t blocks_taken_by(std::span<const GroupKeys> request) const;
  int32_t acquire(int group, const BlockKey& key, std::vector<BlockCopy>& copies) {
    const GroupKeys one{group, std::span<const BlockKey>(&key, 1)};
    return acquire(std::span<const GroupKeys>(&one, 1), copies).front().front();
  }
  // Makes `block` (full and computed) findable by `key` in its group; `parent` is the key of the block
  // before it in the sequence (nullopt for block 0). No-op when another device block of the group already
  // holds the key (two sequences computed the same content), or when a global group exists and holds
  // neither `parent` nor, for a block of a sliding group, `key` itself: such a block could never give a hit.
  // Register the global groups' blocks first.
  void register_key(int32_t block, const BlockKey& key, const std::optional<BlockKey>& parent);

  // Checks the pool's internal invariants (refcounts, queue membership, maps, the key tree); throws on a
  // violation.
  void check_invariants() const;

 private:
  void ref(int32_t block);
  // Copies the keyed block `block` to a host slot (when the tier has room that no copy in flight pins).
  void evict_to_host(int32_t block, std::vector<BlockCopy>& copies);
  // Frees host slot `slot` (dropping its key).
  void drop_slot(int32_t slot);
  // The key of device block `block` is forgotten; a cached block moves to the front of the free queue.
  void forget_block(int32_t block);
  // (group, key) is held neither on the device nor the host any more: drops what can no longer form a hit.
  void lost(int group, const BlockKey& key);
  // Forgets `key` in `group` on the device and the host, without further cascades.
  void forget(int group, const BlockKey& key);
  bool global_holds(const BlockKey& key) const;
  void note_in_use(int group);

  std::vector<int64_t> windows_;                 // [group]
  std::vector<int> global_groups_;
  std::vector<int32_t> refcount_;                // [block]
  std::vector<int> group_;                       // [block]
  std::vector<std::optional<BlockKey>> key_of_block_;
  LruList free_;                                 // refcount-0 blocks; front is evicted first
  std::vector<std::unordered_map<BlockKey, int32_t, BlockKeyHash>> device_;  // [group]: key -> device block

  std::vector<std::optional<BlockKey>> key_of_slot_;  // host tier slots
  std::vector<int> group_of_slot_;
  std::vector<int32_t> empty_slots_;
  LruList host_lru_;                             // slots holding a key and not being read; front is dropped first
  std::vector<std::unordered_map<BlockKey, int32_t, BlockKeyHash>> host_;  // [group]: key -> slot

  KeyTree tree_;                                 // every (group, key) held on the device or the host
  std::vector<int32_t> in_use_;                  // [group]
  std::vector<int32_t> peak_in_use_;             // [group]
  int32_t peak_total_ = 0;
  std::vector<int64_t> queries_, hits_;          // [group]
};

}  // namespace tide
