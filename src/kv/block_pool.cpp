#include "kv/block_pool.h"

#include "core/error.h"

namespace tide {

namespace {

int32_t checked_size(int32_t n, const char* what) {
  if (n < 0) fail("block pool: {} must be >= 0, got {}", what, n);
  return n;
}

}  // namespace

BlockPool::BlockPool(int32_t num_blocks, int32_t num_host_blocks, std::vector<int64_t> group_windows)
    : windows_(std::move(group_windows)),
      refcount_(static_cast<size_t>(checked_size(num_blocks, "number of blocks")), 0),
      group_(static_cast<size_t>(num_blocks), 0),
      key_of_block_(static_cast<size_t>(num_blocks)),
      free_(num_blocks),
      device_(windows_.size()),
      key_of_slot_(static_cast<size_t>(checked_size(num_host_blocks, "number of host blocks"))),
      group_of_slot_(static_cast<size_t>(num_host_blocks), 0),
      host_lru_(num_host_blocks),
      host_(windows_.size()),
      in_use_(windows_.size(), 0),
      peak_in_use_(windows_.size(), 0),
      queries_(windows_.size(), 0),
      hits_(windows_.size(), 0) {
  if (windows_.empty()) fail("block pool: at least one layer group is needed");
  for (size_t g = 0; g < windows_.size(); ++g) {
    if (windows_[g] < 0) fail("block pool: a group's window must be >= 0 (0: global), got {}", windows_[g]);
    if (windows_[g] == 0) global_groups_.push_back(static_cast<int>(g));
  }
  for (int32_t b = 0; b < num_blocks; ++b) free_.push_back(b);
  for (int32_t s = num_host_blocks - 1; s >= 0; --s) empty_slots_.push_back(s);
}

void BlockPool::count_lookup(int group, int64_t queries, int64_t hits) {
  queries_[static_cast<size_t>(group)] += queries;
  hits_[static_cast<size_t>(group)] += hits;
}

// ---  blocks

int32_t BlockPool::allocate(int group, std::vector<BlockCopy>& copies) {
  if (free_.empty()) fail("KV cache exhausted ({} blocks)", num_blocks());
  const int32_t block = free_.front();
  free_.remove(block);
  if (key_of_block_[static_cast<size_t>(block)]) evict_to_host(block, copies);
  group_[static_cast<size_t>(block)] = group;
  refcount_[static_cast<size_t>(block)] = 1;
  ++in_use_[static_cast<size_t>(group)];
  note_in_use(group);
  return block;
}

void BlockPool::evict_to_host(int32_t block, std::vector<BlockCopy>& copies) {
  const int g = group_[static_cast<size_t>(block)];
  const BlockKey key = *key_of_block_[static_cast<size_t>(block)];
  // Off the device first; the tree still counts this holder, so the key's node survives what follows.
  device_[static_cast<size_t>(g)].erase(key);
  key_of_block_[static_cast<size_t>(block)].reset();
  auto& host = host_[static_cast<size_t>(g)];
  bool kept = false;
  if (const auto it = host.find(key); it != host.end()) {  // the host already has this content
    if (host_lru_.contains(it->second)) {
      host_lru_.remove(it->second);
      host_lru_.push_back(it->second);
    }
    kept = true;
  } else if (!key_of_slot_.empty()) {
    if (empty_slots_.empty() && !host_lru_.empty()) {
      // Drop the least recently used slot; what only its key made usable goes too.
      const int32_t victim = host_lru_.front();
      const int victim_group = group_of_slot_[static_cast<size_t>(victim)];
      const BlockKey victim_key = *key_of_slot_[static_cast<size_t>(victim)];
      drop_slot(victim);
      if (!on_device(victim_group, victim_key)) lost(victim_group, victim_key);
    }
    // Every slot may be pinned by a copy in flight; and the cascade may have made this block useless.
    const std::optional<BlockKey> parent = tree_.parent(key);
    const bool servable = global_groups_.empty() || ((!parent || global_holds(*parent)) &&
                                                     (windows_[static_cast<size_t>(g)] == 0 || global_holds(key)));
    if (!empty_slots_.empty() && servable) {
      const int32_t slot = empty_slots_.back();
      empty_slots_.pop_back();
      key_of_slot_[static_cast<size_t>(slot)] = key;
      group_of_slot_[static_cast<size_t>(slot)] = g;
      host[key] = slot;
      host_lru_.push_back(slot);
      tree_.hold(key, parent);
      copies.push_back(BlockCopy{BlockCopy::Direction::kToHost, block, slot});
      kept = true;
    }
  }
  tree_.drop(key);
  if (!kept) lost(g, key);
}

void BlockPool::ref(int32_t block) {
  int32_t& rc = refcount_[static_cast<size_t>(block)];
  if (rc == 0) {
    free_.remove(block);
    ++in_use_[static_cast<size_t>(group_[static_cast<size_t>(block)])];
  }
  ++rc;
  note_in_use(group_[static_cast<size_t>(block)]);
}

void BlockPool::note_in_use(int group) {
  peak_in_use_[static_cast<size_t>(group)] =
      std::max(peak_in_use_[static_cast<size_t>(group)], in_use_[static_cast<size_t>(group)]);
  peak_total_ = std::max(peak_total_, num_in_use());
}

void BlockPool::release(int32_t block) {
  TIDE_CHECK(block >= 0 && block < num_blocks());
  int32_t& rc = refcount_[static_cast<size_t>(block)];
  TIDE_CHECK(rc > 0);
  if (--rc > 0) return;
  --in_use_[static_cast<size_t>(group_[static_cast<size_t>(block)])];
  if (key_of_block_[static_cast<size_t>(block)]) {
    free_.push_back(block);
  } else {
    free_.push_front(block);
  }
}

// ---  keys that can no longer form a hit

bool BlockPool::global_holds(const BlockKey& key) const {
  for (int g : global_groups_) {
    if (contains(g, key)) return true;
  }
  return false;
}

void BlockPool::lost(int group, const BlockKey& key) {
  // Groups that share the window read the key for the same hits, which are gone.
  for (int g = 0; g < num_groups(); ++g) {
    if (g != group && windows_[static_cast<size_t>(g)] == windows_[static_cast<size_t>(group)]) forget(g, key);
  }
  if (windows_[static_cast<size_t>(group)] != 0) return;
  // A hit needs the global groups' whole chain: nothing at or below the key can form one any more.
  for (const BlockKey& k : tree_.subtree(key)) {
    for (int g = 0; g < num_groups(); ++g) forget(g, k);
  }
}

void BlockPool::forget(int group, const BlockKey& key) {
  if (const std::optional<int32_t> block = device_block(group, key)) forget_block(*block);
  const auto& host = host_[static_cast<size_t>(group)];
  if (const auto it = host.find(key); it != host.end() && host_lru_.contains(it->second)) drop_slot(it->second);
}

void BlockPool::forget_block(int32_t block) {
  const BlockKey key = *key_of_block_[static_cast<size_t>(block)];
  device_[static_cast<size_t>(group_[static_cast<size_t>(block)])].erase(key);
  key_of_block_[static_cast<size_t>(block)].reset();
  tree_.drop(key);
  if (refcount_[static_cast<size_t>(block)] == 0) {  // can never give a hit now: evicted first
    free_.remove(block);
    free_.push_front(block);
  }
}

void BlockPool::drop_slot(int32_t slot) {
  const BlockKey key = *key_of_slot_[static_cast<size_t>(slot)];
  host_[static_cast<size_t>(group_of_slot_[static_cast<size_t>(slot)])].erase(key);
  key_of_slot_[static_cast<size_t>(slot)].reset();
  if (host_lru_.contains(slot)) host_lru_.remove(slot);
  empty_slots_.push_back(slot);
  tree_.drop(key);
}

// ---  prefix hits

int32_t BlockPool::blocks_taken_by(std::span<const GroupKeys> request) const {
  int32_t taken = 0;
  for (const GroupKeys& r : request) {
    for (const BlockKey& key : r.keys) {
      const std::optional<int32_t> block = device_block(r.group, key);
      if (!block) TIDE_CHECK(on_host(r.group, key));
      taken += !block || refcount(*block) == 0;
    }
  }
  return taken;
}

bool BlockPool::can_acquire(std::span<const GroupKeys> request) const {
  return blocks_taken_by(request) <= num_free();
}

std::vector<std::vector<int32_t>> BlockPool::acquire(std::span<const GroupKeys> request,
                                                     std::vector<BlockCopy>& copies) {
  if (!can_acquire(request)) {
    fail("KV cache exhausted ({} blocks): no room to copy cached blocks back from the host tier", num_blocks());
  }
  // Device hits first, so that allocating blocks for host hits cannot evict one of them; the host slots
  // being read are pinned (out of the host LRU) so that those allocations' evictions cannot reuse them.
  std::vector<std::vector<int32_t>> blocks;
  for (const GroupKeys& r : request) {
    std::vector<int32_t>& out = blocks.emplace_back(r.keys.size(), kNullBlock);
    for (size_t i = 0; i < r.keys.size(); ++i) {
      if (const std::optional<int32_t> block = device_block(r.group, r.keys[i])) {
        ref(*block);
        out[i] = *block;
      } else {
        host_lru_.remove(host_[static_cast<size_t>(r.group)].at(r.keys[i]));
      }
    }
  }
  for (size_t e = 0; e < request.size(); ++e) {
    const GroupKeys& r = request[e];
    for (size_t i = 0; i < r.keys.size(); ++i) {
      if (blocks[e][i] != kNullBlock) continue;
      const BlockKey& key = r.keys[i];
      const int32_t slot = host_[static_cast<size_t>(r.group)].at(key);
      const int32_t block = allocate(r.group, copies);
      copies.push_back(BlockCopy{BlockCopy::Direction::kToDevice, block, slot});
      key_of_block_[static_cast<size_t>(block)] = key;
      device_[static_cast<size_t>(r.group)][key] = block;
      tree_.hold(key, tree_.parent(key));  // the host's holder keeps the node
      host_lru_.push_back(slot);           // unpinned, and most recently used
      blocks[e][i] = block;
    }
  }
  return blocks;
}

void BlockPool::register_key(int32_t block, const BlockKey& key, const std::optional<BlockKey>& parent) {
  TIDE_CHECK(refcount_[static_cast<size_t>(block)] > 0);
  const int g = group_[static_cast<size_t>(block)];
  if (key_of_block_[static_cast<size_t>(block)] || on_device(g, key)) return;
  if (!global_groups_.empty()) {
    if (parent && !global_holds(*parent)) return;
    if (windows_[static_cast<size_t>(g)] != 0 && !global_holds(key)) return;
  }
  key_of_block_[static_cast<size_t>(block)] = key;
  device_[static_cast<size_t>(g)][key] = block;
  tree_.hold(key, parent);
}

// ---  statistics and checks

GroupStats BlockPool::group_stats(int group) const {
  const auto g = static_cast<size_t>(group);
  GroupStats s;
  s.in_use_blocks = in_use_[g];
  s.peak_in_use_blocks = peak_in_use_[g];
  for (const auto& [key, block] : device_[g]) s.cached_blocks += refcount(block) == 0;
  s.host_blocks = static_cast<int32_t>(host_[g].size());
  s.queries = queries_[g];
  s.hits = hits_[g];
  return s;
}

ArenaStats BlockPool::stats() const {
  ArenaStats s;
  s.capacity_blocks = num_blocks();
  s.in_use_blocks = num_in_use();
  s.peak_in_use_blocks = peak_total_;
  s.host_capacity_blocks = num_host_blocks();
  for (int g = 0; g < num_groups(); ++g) {
    const GroupStats gs = group_stats(g);
    s.cached_blocks += gs.cached_blocks;
    s.host_blocks += gs.host_blocks;
  }
  return s;
}

void BlockPool::check_invariants() const {
  int32_t free_count = 0;
  std::vector<int32_t> in_use(windows_.size(), 0);
  std::unordered_map<BlockKey, int32_t, BlockKeyHash> holders;
  for (int32_t b = 0; b < num_blocks(); ++b) {
    const int32_t rc = refcount_[static_cast<size_t>(b)];
    if (rc < 0) fail("block {}: negative refcount", b);
    if ((rc == 0) != free_.contains(b)) fail("block {}: refcount {} but free-queue membership {}", b, rc, free_.contains(b));
    free_count += rc == 0;
    if (rc > 0) ++in_use[static_cast<size_t>(group_of(b))];
    if (const auto& key = key_of_block_[static_cast<size_t>(b)]) {
      const auto& map = device_[static_cast<size_t>(group_of(b))];
      const auto it = map.find(*key);
      if (it == map.end() || it->second != b) fail("block {}: key not mapped back to it", b);
      ++holders[*key];
    }
  }
  if (free_count != free_.size()) fail("free queue holds {} blocks, {} have refcount 0", free_.size(), free_count);
  if (in_use != in_use_) fail("per-group in-use counts do not match the refcounts");
  for (size_t g = 0; g < windows_.size(); ++g) {
    for (const auto& [key, block] : device_[g]) {
      if (key_of_block_[static_cast<size_t>(block)] != key || group_of(block) != static_cast<int>(g)) {
        fail("group {}: device map names block {} with another key or group", g, block);
      }
    }
    for (const auto& [key, slot] : host_[g]) {
      if (key_of_slot_[static_cast<size_t>(slot)] != key || group_of_slot_[static_cast<size_t>(slot)] != static_cast<int>(g)) {
        fail("group {}: host map names slot {} with another key or group", g, slot);
      }
      ++holders[key];
    }
  }
  size_t keyed_slots = 0;
  for (const auto& k : key_of_slot_) keyed_slots += k.has_value();
  if (keyed_slots + empty_slots_.size() != key_of_slot_.size()) {
    fail("host tier: {} slots hold a key + {} empty != {} slots", keyed_slots, empty_slots_.size(), key_of_slot_.size());
  }
  if (static_cast<size_t>(host_lru_.size()) > keyed_slots) fail("host LRU holds more slots than hold a key");
  for (const auto& [key, n] : holders) {
    if (tree_.holders(key) != n) fail("key tree counts {} holders of a key held {} times", tree_.holders(key), n);
  }
  int64_t total = 0;
  for (const auto& [key, n] : holders) total += n;
  if (tree_.num_holders() != total) fail("key tree counts {} holders, the maps {}", tree_.num_holders(), total);
}

}  // namespace tide
