#include "kv/block_pool.h"

#include "core/error.h"

namespace tide {

namespace {

int32_t checked_size(int32_t n, const char* what) {
  if (n < 0) fail("block pool: {} must be >= 0, got {}", what, n);
  return n;
}

}  // namespace

BlockPool::BlockPool(int32_t num_blocks, int32_t num_host_blocks)
    : refcount_(static_cast<size_t>(checked_size(num_blocks, "number of blocks")), 0),
      key_of_block_(static_cast<size_t>(num_blocks)),
      free_(num_blocks),
      key_of_slot_(static_cast<size_t>(checked_size(num_host_blocks, "number of host blocks"))),
      host_lru_(num_host_blocks) {
  for (int32_t b = 0; b < num_blocks; ++b) free_.push_back(b);
  for (int32_t s = num_host_blocks - 1; s >= 0; --s) empty_slots_.push_back(s);
}

void BlockPool::count_lookup(int64_t queries, int64_t hits) {
  queries_ += queries;
  hits_ += hits;
}

int32_t BlockPool::allocate(std::vector<BlockCopy>& copies) {
  if (free_.empty()) fail("KV block pool exhausted ({} blocks)", num_blocks());
  const int32_t block = free_.front();
  std::optional<BlockKey>& key = key_of_block_[static_cast<size_t>(block)];
  if (key) {
    device_.erase(*key);
    evict_to_host(block, *key, copies);
    key.reset();
  }
  ref(block);
  return block;
}

void BlockPool::evict_to_host(int32_t block, const BlockKey& key, std::vector<BlockCopy>& copies) {
  if (key_of_slot_.empty()) return;
  if (auto it = host_.find(key); it != host_.end()) {  // the host already has this content
    host_lru_.remove(it->second);
    host_lru_.push_back(it->second);
    return;
  }
  int32_t slot;
  if (!empty_slots_.empty()) {
    slot = empty_slots_.back();
    empty_slots_.pop_back();
  } else if (!host_lru_.empty()) {
    slot = host_lru_.front();
    host_lru_.remove(slot);
    host_.erase(*key_of_slot_[static_cast<size_t>(slot)]);
  } else {
    return;  // every slot is pinned by a copy in flight: drop the block
  }
  key_of_slot_[static_cast<size_t>(slot)] = key;
  host_[key] = slot;
  host_lru_.push_back(slot);
  copies.push_back(BlockCopy{BlockCopy::Direction::kToHost, block, slot});
}

void BlockPool::ref(int32_t block) {
  int32_t& rc = refcount_[static_cast<size_t>(block)];
  if (rc == 0) free_.remove(block);
  ++rc;
  note_in_use();
}

void BlockPool::release(int32_t block) {
  TIDE_CHECK(block >= 0 && block < num_blocks());
  int32_t& rc = refcount_[static_cast<size_t>(block)];
  TIDE_CHECK(rc > 0);
  if (--rc > 0) return;
  if (key_of_block_[static_cast<size_t>(block)]) {
    free_.push_back(block);
  } else {
    free_.push_front(block);
  }
}

bool BlockPool::can_acquire(std::span<const BlockKey> keys) const {
  // Cached device hits leave the free queue; host hits each need a free block.
  int32_t cached = 0, host_only = 0;
  for (const BlockKey& key : keys) {
    const auto it = device_.find(key);
    if (it == device_.end()) {
      TIDE_CHECK(host_.count(key));
      ++host_only;
    } else {
      cached += refcount_[static_cast<size_t>(it->second)] == 0;
    }
  }
  return host_only <= num_free() - cached;
}

std::vector<int32_t> BlockPool::acquire(std::span<const BlockKey> keys, std::vector<BlockCopy>& copies) {
  if (!can_acquire(keys)) {
    fail("KV block pool exhausted ({} blocks): no room to copy cached blocks back from the host tier", num_blocks());
  }
  // Device hits first, so that allocating blocks for host hits cannot evict one of them; the host slots
  // being read are pinned (out of the host LRU) so that those allocations' evictions cannot reuse them.
  std::vector<int32_t> blocks(keys.size(), kNullBlock);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (const auto it = device_.find(keys[i]); it != device_.end()) {
      ref(it->second);
      blocks[i] = it->second;
    } else {
      host_lru_.remove(host_.at(keys[i]));
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (blocks[i] != kNullBlock) continue;
    const int32_t slot = host_.at(keys[i]);
    blocks[i] = allocate(copies);
    copies.push_back(BlockCopy{BlockCopy::Direction::kToDevice, blocks[i], slot});
    key_of_block_[static_cast<size_t>(blocks[i])] = keys[i];
    device_[keys[i]] = blocks[i];
    host_lru_.push_back(slot);  // unpinned, and most recently used
  }
  return blocks;
}

void BlockPool::register_key(int32_t block, const BlockKey& key) {
  TIDE_CHECK(refcount_[static_cast<size_t>(block)] > 0);
  std::optional<BlockKey>& current = key_of_block_[static_cast<size_t>(block)];
  if (current || device_.count(key)) return;
  current = key;
  device_[key] = block;
}

PoolStats BlockPool::stats() const {
  PoolStats s;
  s.capacity_blocks = num_blocks();
  s.in_use_blocks = num_in_use();
  s.peak_in_use_blocks = peak_in_use_;
  for (const auto& [key, block] : device_) s.cached_blocks += refcount_[static_cast<size_t>(block)] == 0;
  s.host_blocks = static_cast<int32_t>(host_.size());
  s.queries = queries_;
  s.hits = hits_;
  return s;
}

void BlockPool::check_invariants() const {
  int32_t free_count = 0;
  for (int32_t b = 0; b < num_blocks(); ++b) {
    const int32_t rc = refcount_[static_cast<size_t>(b)];
    if (rc < 0) fail("block {}: negative refcount", b);
    if ((rc == 0) != free_.contains(b)) fail("block {}: refcount {} but free-queue membership {}", b, rc, free_.contains(b));
    free_count += rc == 0;
    if (const auto& key = key_of_block_[static_cast<size_t>(b)]) {
      const auto it = device_.find(*key);
      if (it == device_.end() || it->second != b) fail("block {}: key not mapped back to it", b);
    }
  }
  if (free_count != free_.size()) fail("free queue holds {} blocks, {} have refcount 0", free_.size(), free_count);
  for (const auto& [key, block] : device_) {
    if (key_of_block_[static_cast<size_t>(block)] != key) fail("device map names block {} with another key", block);
  }
  for (const auto& [key, slot] : host_) {
    if (key_of_slot_[static_cast<size_t>(slot)] != key) fail("host map names slot {} with another key", slot);
  }
  if (static_cast<size_t>(host_lru_.size()) + empty_slots_.size() != key_of_slot_.size()) {
    fail("host tier: {} slots in use + {} empty != {} slots", host_lru_.size(), empty_slots_.size(), key_of_slot_.size());
  }
}

}  // namespace tide
