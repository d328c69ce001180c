#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"

namespace tide {

namespace {

std::vector<int64_t> checked_windows(std::vector<int64_t> windows) {
  if (windows.empty()) fail("the KV cache needs at least one layer group");
  for (int64_t w : windows) {
    if (w < 0) fail("a layer group's window must be >= 0 (0: global), got {}", w);
  }
  return windows;
}

}  // namespace

KvCacheManager::KvCacheManager(int64_t block_size, std::vector<int64_t> group_windows, KvArenaSpec arena,
                               bool enable_prefix_caching, uint64_t extra_key)
    : KvCacheManager(block_size, group_windows,
                     std::make_shared<BlockPool>(arena.num_blocks, arena.num_host_blocks, checked_windows(group_windows)),
                     0, enable_prefix_caching, extra_key) {}

KvCacheManager::KvCacheManager(int64_t block_size, std::vector<int64_t> group_windows, std::shared_ptr<BlockPool> pool,
                               int first_group, bool enable_prefix_caching, uint64_t extra_key)
    : block_size_(block_size),
      windows_(checked_windows(std::move(group_windows))),
      pool_(std::move(pool)),
      base_(first_group),
      prefix_caching_(enable_prefix_caching),
      root_key_(root_block_key(extra_key)) {
  if (block_size_ <= 0) fail("block size must be positive, got {}", block_size_);
  TIDE_CHECK(pool_ != nullptr && base_ >= 0 && base_ + num_groups() <= pool_->num_groups());
  for (int g = 0; g < num_groups(); ++g) {
    if (pool_->window(base_ + g) != window(g)) {
      fail("KV cache: layer group {} has window {}, its group {} of the shared arena {}", g, window(g), base_ + g,
           pool_->window(base_ + g));
    }
  }
  for (int pass = 0; pass < 2; ++pass) {
    for (int g = 0; g < num_groups(); ++g) {
      if ((window(g) == 0) == (pass == 0)) registration_order_.push_back(g);
    }
  }
}

KvCacheManager::KvCacheManager(const KvCacheManager& other)
    : block_size_(other.block_size_),
      windows_(other.windows_),
      registration_order_(other.registration_order_),
      pool_(std::make_shared<BlockPool>(*other.pool_)),
      base_(other.base_),
      copies_(other.copies_),
      prefix_caching_(other.prefix_caching_),
      root_key_(other.root_key_) {}

KvCacheManager& KvCacheManager::operator=(const KvCacheManager& other) {
  if (this != &other) *this = KvCacheManager(other);
  return *this;
}

int64_t KvCacheManager::first_block_read(int g, int64_t pos) const {
  const int64_t w = window(g);
  return w == 0 ? 0 : std::max<int64_t>(0, pos - w + 1) / block_size_;
}

// ---  sizing

int64_t KvCacheManager::max_blocks_per_sequence(int g, int64_t num_tokens, int64_t chunk) const {
  const int64_t w = window(g);
  if (w == 0) return blocks_for(num_tokens);
  // A step over positions [s, s + chunk) holds the blocks overlapping [s - W + 1, s + chunk - 1]: a span of
  // L = chunk + W - 1 positions overlaps at most ceil((L - 1) / B) + 1 blocks.
  return std::min(blocks_for(num_tokens), blocks_for(chunk + w - 2) + 1);
}

int64_t KvCacheManager::max_arena_blocks(int64_t num_tokens, int64_t chunk) const {
  int64_t total = 0;
  for (int g = 0; g < num_groups(); ++g) total += max_blocks_per_sequence(g, num_tokens, chunk);
  return total;
}

bool KvCacheManager::fits(int64_t num_tokens, int64_t chunk) const {
  return max_arena_blocks(num_tokens, chunk) <= pool_->num_blocks();
}

// ---  the reuse rule

std::vector<BlockKey> KvCacheManager::prompt_keys(std::span<const int32_t> prompt, int64_t num_blocks) const {
  std::vector<BlockKey> keys;
  BlockKey parent = root_key_;
  for (int64_t j = 0; j < num_blocks; ++j) {
    parent = chain_block_key(parent, prompt.subspan(static_cast<size_t>(j * block_size_), static_cast<size_t>(block_size_)));
    keys.push_back(parent);
  }
  return keys;
}

int64_t KvCacheManager::num_reusable_tokens(std::span<const int32_t> prompt) const {
  if (!prefix_caching_ || prompt.empty()) return 0;
  const int64_t max_blocks = (static_cast<int64_t>(prompt.size()) - 1) / block_size_;
  const std::vector<BlockKey> keys = prompt_keys(prompt, max_blocks);
  // last_miss[g][k]: the largest j < k whose block group g cannot serve, or -1.
  std::vector<std::vector<int64_t>> last_miss(windows_.size(), std::vector<int64_t>(static_cast<size_t>(max_blocks + 1), -1));
  for (int g = 0; g < num_groups(); ++g) {
    std::vector<int64_t>& miss = last_miss[static_cast<size_t>(g)];
    for (int64_t j = 0; j < max_blocks; ++j) {
      miss[static_cast<size_t>(j + 1)] = pool_->contains(base_ + g, keys[static_cast<size_t>(j)]) ? miss[static_cast<size_t>(j)] : j;
    }
  }
  // Largest k where every group holds the blocks tokens k*B .. T-1 will read (a fixed point over the groups).
  for (int64_t k = max_blocks; k > 0; --k) {
    bool all = true;
    for (int g = 0; g < num_groups() && all; ++g) {
      all = last_miss[static_cast<size_t>(g)][static_cast<size_t>(k)] < first_block_read(g, k * block_size_);
    }
    if (all) return k * block_size_;
  }
  return 0;
}

std::vector<BlockPool::GroupKeys> KvCacheManager::hit_keys(std::span<const BlockKey> keys, int64_t num_hit_blocks) const {
  std::vector<BlockPool::GroupKeys> request;
  for (int g = 0; g < num_groups(); ++g) {
    const int64_t start = num_hit_blocks == 0 ? 0 : first_block_read(g, num_hit_blocks * block_size_);
    request.push_back(BlockPool::GroupKeys{base_ + g, keys.subspan(static_cast<size_t>(start))});
  }
  return request;
}

int64_t KvCacheManager::admit(SequenceKv& seq, std::span<const int32_t> prompt, bool reuse_prefix) {
  TIDE_CHECK(seq.tokens.empty() && seq.block_tables.empty());
  const int64_t reused = reuse_prefix ? num_reusable_tokens(prompt) : 0;
  const int64_t num_hit_blocks = reused / block_size_;
  const std::vector<BlockKey> keys = prompt_keys(prompt, num_hit_blocks);
  const std::vector<BlockPool::GroupKeys> request = hit_keys(keys, num_hit_blocks);
  if (!pool_->can_acquire(request)) fail("the KV cache has no free block to copy cached blocks back from the host tier");

  const int64_t max_blocks = prompt.empty() ? 0 : (static_cast<int64_t>(prompt.size()) - 1) / block_size_;
  std::vector<std::vector<int32_t>> blocks = pool_->acquire(request, copies_);
  seq.block_tables.assign(windows_.size(), {});
  seq.first_held_block.assign(windows_.size(), 0);
  for (int g = 0; g < num_groups(); ++g) {
    const auto start = static_cast<int64_t>(keys.size() - request[static_cast<size_t>(g)].keys.size());
    if (prefix_caching_) {
      pool_->count_lookup(base_ + g, max_blocks - first_block_read(g, max_blocks * block_size_), num_hit_blocks - start);
    }
    std::vector<int32_t>& table = seq.block_tables[static_cast<size_t>(g)];
    table.assign(static_cast<size_t>(start), kNullBlock);
    table.insert(table.end(), blocks[static_cast<size_t>(g)].begin(), blocks[static_cast<size_t>(g)].end());
    seq.first_held_block[static_cast<size_t>(g)] = start;
  }
  seq.tokens.assign(prompt.begin(), prompt.begin() + reused);
  seq.block_keys = keys;
  seq.num_cached_tokens = reused;
  return reused;
}

// ---  growth

bool KvCacheManager::can_append(const SequenceKv& seq, int64_t num_new_tokens) const {
  const int64_t missing = std::max<int64_t>(0, blocks_for(seq.num_computed() + num_new_tokens) - seq.num_table_blocks());
  return missing * num_groups() <= pool_->num_free();
}

int64_t KvCacheManager::num_appendable_tokens(const SequenceKv& seq, int64_t max_new_tokens, int64_t keep_free) const {
  // Every group's table grows by the same blocks: blocks_for(n + k) <= held + free / groups.
  const int64_t free = std::max<int64_t>(0, pool_->num_free() - keep_free);
  const int64_t most = (seq.num_table_blocks() + free / num_groups()) * block_size_ - seq.num_computed();
  return std::max<int64_t>(0, std::min(max_new_tokens, most));
}

int64_t KvCacheManager::num_admissible_tokens(std::span<const int32_t> prompt, int64_t max_new_tokens,
                                              bool reuse_prefix) const {
  const int64_t reused = reuse_prefix ? num_reusable_tokens(prompt) : 0;
  const int64_t num_hit_blocks = reused / block_size_;
  const std::vector<BlockKey> keys = prompt_keys(prompt, num_hit_blocks);
  const int64_t free_after = pool_->num_free() - pool_->blocks_taken_by(hit_keys(keys, num_hit_blocks));
  if (free_after < 0) return 0;
  // After admit every table has num_hit_blocks entries (nulls before the window included).
  const int64_t most = std::min({max_new_tokens, static_cast<int64_t>(prompt.size()) - reused,
                                 (num_hit_blocks + free_after / num_groups()) * block_size_ - reused});
  return std::max<int64_t>(0, most);
}

void KvCacheManager::append(SequenceKv& seq, int64_t num_new_tokens) {
  if (seq.block_tables.empty()) {
    seq.block_tables.assign(windows_.size(), {});
    seq.first_held_block.assign(windows_.size(), 0);
  }
  if (!can_append(seq, num_new_tokens)) {
    fail("KV cache exhausted ({} blocks, {} free): no room for {} more tokens", pool_->num_blocks(), pool_->num_free(),
         num_new_tokens);
  }
  const int64_t needed = blocks_for(seq.num_computed() + num_new_tokens);
  for (int64_t j = seq.num_table_blocks(); j < needed; ++j) {
    for (int g = 0; g < num_groups(); ++g) seq.block_tables[static_cast<size_t>(g)].push_back(pool_->allocate(base_ + g, copies_));
  }
}

void KvCacheManager::commit(SequenceKv& seq, std::span<const int32_t> tokens) {
  TIDE_CHECK(!seq.block_tables.empty());  // append() came first
  seq.tokens.insert(seq.tokens.end(), tokens.begin(), tokens.end());
  TIDE_CHECK(blocks_for(seq.num_computed()) <= seq.num_table_blocks());
  const int64_t num_full = seq.num_computed() / block_size_;
  while (static_cast<int64_t>(seq.block_keys.size()) < num_full) {
    const size_t j = seq.block_keys.size();
    const std::optional<BlockKey> parent = j == 0 ? std::nullopt : std::optional<BlockKey>(seq.block_keys.back());
    seq.block_keys.push_back(chain_block_key(
        parent.value_or(root_key_),
        std::span<const int32_t>(seq.tokens).subspan(j * static_cast<size_t>(block_size_), static_cast<size_t>(block_size_))));
    if (!prefix_caching_) continue;
    for (int g : registration_order_) {
      const int32_t block = seq.block_tables[static_cast<size_t>(g)][j];
      if (block != kNullBlock) pool_->register_key(block, seq.block_keys.back(), parent);
    }
  }
  release_out_of_window(seq);
}

void KvCacheManager::release_out_of_window(SequenceKv& seq) {
  for (int g = 0; g < num_groups(); ++g) {
    const int64_t upto = first_block_read(g, seq.num_computed());  // the next token reads from here on
    std::vector<int32_t>& table = seq.block_tables[static_cast<size_t>(g)];
    int64_t& first = seq.first_held_block[static_cast<size_t>(g)];
    for (; first < upto; ++first) {
      int32_t& block = table[static_cast<size_t>(first)];
      if (block != kNullBlock) pool_->release(block);
      block = kNullBlock;
    }
  }
}

void KvCacheManager::truncate(SequenceKv& seq) {
  const int64_t keep = blocks_for(seq.num_computed());
  for (int64_t j = seq.num_table_blocks() - 1; j >= keep; --j) {
    for (std::vector<int32_t>& table : seq.block_tables) {
      if (table.back() != kNullBlock) pool_->release(table.back());
      table.pop_back();
    }
  }
}

void KvCacheManager::free(SequenceKv& seq) {
  for (int64_t j = seq.num_table_blocks() - 1; j >= 0; --j) {
    for (const std::vector<int32_t>& table : seq.block_tables) {
      if (table[static_cast<size_t>(j)] != kNullBlock) pool_->release(table[static_cast<size_t>(j)]);
    }
  }
  seq = SequenceKv{};
}

std::vector<BlockCopy> KvCacheManager::take_copies() {
  std::vector<BlockCopy> out;
  out.swap(copies_);
  return out;
}

void KvCacheManager::check_invariants(std::span<const SequenceKv* const> live) const {
  pool_->check_invariants();
  std::vector<int32_t> refs(static_cast<size_t>(pool_->num_blocks()), 0);
  for (const SequenceKv* seq : live) {
    if (seq->block_tables.empty()) continue;
    for (int g = 0; g < num_groups(); ++g) {
      const std::vector<int32_t>& table = seq->block_tables[static_cast<size_t>(g)];
      if (static_cast<int64_t>(table.size()) != seq->num_table_blocks()) fail("group {}: table of another length", g);
      for (size_t j = 0; j < table.size(); ++j) {
        if (table[j] == kNullBlock) continue;
        if (static_cast<int64_t>(j) < seq->first_held_block[static_cast<size_t>(g)]) {
          fail("group {}: block {} held before the sequence's first held block", g, j);
        }
        if (pool_->group_of(table[j]) != base_ + g) {
          fail("group {}: block {} belongs to group {}", g, table[j], pool_->group_of(table[j]) - base_);
        }
        ++refs[static_cast<size_t>(table[j])];
      }
    }
  }
  for (int32_t b = 0; b < pool_->num_blocks(); ++b) {
    // A block in use by another manager sharing the arena is that manager's to account for.
    const int group = pool_->group_of(b);
    const bool mine = group >= base_ && group < base_ + num_groups();
    if (!mine && refs[static_cast<size_t>(b)] == 0) continue;
    if (refs[static_cast<size_t>(b)] != pool_->refcount(b)) {
      fail("block {} has refcount {} but {} table references", b, pool_->refcount(b), refs[static_cast<size_t>(b)]);
    }
  }
}

}  // namespace tide
