#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"

namespace tide {

KvCacheManager::KvCacheManager(int64_t block_size, std::vector<PoolSpec> pools, bool enable_prefix_caching,
                               uint64_t extra_key)
    : block_size_(block_size),
      specs_(std::move(pools)),
      copies_(specs_.size()),
      prefix_caching_(enable_prefix_caching),
      root_key_(root_block_key(extra_key)) {
  if (block_size_ <= 0) fail("block size must be positive, got {}", block_size_);
  for (const PoolSpec& s : specs_) {
    if (s.window < 0) fail("a pool's window must be >= 0 (0: global), got {}", s.window);
    pools_.emplace_back(s.num_blocks, s.num_host_blocks);
  }
}

int64_t KvCacheManager::first_block_read(int i, int64_t pos) const {
  const int64_t window = specs_[static_cast<size_t>(i)].window;
  return window == 0 ? 0 : std::max<int64_t>(0, pos - window + 1) / block_size_;
}

int64_t KvCacheManager::max_blocks_per_sequence(int i, int64_t num_tokens, int64_t chunk) const {
  const int64_t window = specs_[static_cast<size_t>(i)].window;
  if (window == 0) return blocks_for(num_tokens);
  // A step over positions [s, s + chunk) holds the blocks overlapping [s - W + 1, s + chunk - 1]: a span of
  // L = chunk + W - 1 positions overlaps at most ceil((L - 1) / B) + 1 blocks.
  return std::min(blocks_for(num_tokens), blocks_for(chunk + window - 2) + 1);
}

bool KvCacheManager::fits(int64_t num_tokens, int64_t chunk) const {
  for (int p = 0; p < num_pools(); ++p) {
    if (max_blocks_per_sequence(p, num_tokens, chunk) > pool(p).num_blocks()) return false;
  }
  return true;
}

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
  // last_miss[p][k]: the largest j < k whose block pool p cannot serve, or -1.
  std::vector<std::vector<int64_t>> last_miss(pools_.size(), std::vector<int64_t>(static_cast<size_t>(max_blocks + 1), -1));
  for (size_t p = 0; p < pools_.size(); ++p) {
    for (int64_t j = 0; j < max_blocks; ++j) {
      last_miss[p][static_cast<size_t>(j + 1)] = pools_[p].contains(keys[static_cast<size_t>(j)]) ? last_miss[p][static_cast<size_t>(j)] : j;
    }
  }
  // Largest k where every pool holds the blocks tokens k*B .. T-1 will read (a fixed point over the groups).
  for (int64_t k = max_blocks; k > 0; --k) {
    bool all = true;
    for (int p = 0; p < num_pools() && all; ++p) {
      all = last_miss[static_cast<size_t>(p)][static_cast<size_t>(k)] < first_block_read(p, k * block_size_);
    }
    if (all) return k * block_size_;
  }
  return 0;
}

int64_t KvCacheManager::admit(SequenceKv& seq, std::span<const int32_t> prompt) {
  TIDE_CHECK(seq.tokens.empty() && seq.block_tables.empty());
  const int64_t reused = num_reusable_tokens(prompt);
  const int64_t num_hit_blocks = reused / block_size_;
  const std::vector<BlockKey> keys = prompt_keys(prompt, num_hit_blocks);

  // The blocks each pool serves: the whole chain (global) or the last window before L (sliding). All pools
  // are checked before any is touched, so a failure changes nothing.
  std::vector<int64_t> starts;
  for (int p = 0; p < num_pools(); ++p) {
    starts.push_back(num_hit_blocks == 0 ? 0 : first_block_read(p, reused));
    const auto hit_keys = std::span<const BlockKey>(keys).subspan(static_cast<size_t>(starts.back()));
    if (!pool(p).can_acquire(hit_keys)) {
      fail("KV pool {} has no free block to copy cached blocks back from the host tier", p);
    }
  }
  seq.block_tables.assign(pools_.size(), {});
  seq.first_held_block.assign(pools_.size(), 0);
  const int64_t max_blocks = prompt.empty() ? 0 : (static_cast<int64_t>(prompt.size()) - 1) / block_size_;
  for (int p = 0; p < num_pools(); ++p) {
    BlockPool& bp = pools_[static_cast<size_t>(p)];
    const int64_t start = starts[static_cast<size_t>(p)];
    if (prefix_caching_) {
      bp.count_lookup(max_blocks - first_block_read(p, max_blocks * block_size_), num_hit_blocks - start);
    }
    std::vector<int32_t>& table = seq.block_tables[static_cast<size_t>(p)];
    table.assign(static_cast<size_t>(start), kNullBlock);
    seq.first_held_block[static_cast<size_t>(p)] = start;
    const std::vector<int32_t> blocks = bp.acquire(
        std::span<const BlockKey>(keys).subspan(static_cast<size_t>(start)), copies_[static_cast<size_t>(p)]);
    table.insert(table.end(), blocks.begin(), blocks.end());
  }
  seq.tokens.assign(prompt.begin(), prompt.begin() + reused);
  seq.block_keys = keys;
  seq.num_cached_tokens = reused;
  return reused;
}

bool KvCacheManager::can_append(const SequenceKv& seq, int64_t num_new_tokens) const {
  for (int p = 0; p < num_pools(); ++p) {
    // A sequence never admitted nor appended to has no tables yet.
    const int64_t held = seq.block_tables.empty() ? 0 : static_cast<int64_t>(seq.block_tables[static_cast<size_t>(p)].size());
    const int64_t missing = blocks_for(seq.num_computed() + num_new_tokens) - held;
    if (missing > pool(p).num_free()) return false;
  }
  return true;
}

int64_t KvCacheManager::num_appendable_tokens(const SequenceKv& seq, int64_t max_new_tokens) const {
  // Pool p can give blocks to positions up to (held + free) * B - 1: blocks_for(n + k) <= held + free.
  int64_t most = max_new_tokens;
  for (int p = 0; p < num_pools(); ++p) {
    const int64_t held = seq.block_tables.empty() ? 0 : static_cast<int64_t>(seq.block_tables[static_cast<size_t>(p)].size());
    most = std::min(most, (held + pool(p).num_free()) * block_size_ - seq.num_computed());
  }
  return std::max<int64_t>(0, most);
}

int64_t KvCacheManager::num_admissible_tokens(std::span<const int32_t> prompt, int64_t max_new_tokens) const {
  const int64_t reused = num_reusable_tokens(prompt);
  const int64_t num_hit_blocks = reused / block_size_;
  const std::vector<BlockKey> keys = prompt_keys(prompt, num_hit_blocks);
  int64_t most = std::min(max_new_tokens, static_cast<int64_t>(prompt.size()) - reused);
  for (int p = 0; p < num_pools(); ++p) {
    // What admit takes from the free queue: cached device hits leave it, host-only hits each need a block.
    const BlockPool& bp = pool(p);
    int64_t taken = 0;
    for (int64_t j = num_hit_blocks == 0 ? 0 : first_block_read(p, reused); j < num_hit_blocks; ++j) {
      const std::optional<int32_t> block = bp.device_block(keys[static_cast<size_t>(j)]);
      taken += !block || bp.refcount(*block) == 0;
    }
    const int64_t free_after = bp.num_free() - taken;
    if (free_after < 0) return 0;
    // After admit the table has num_hit_blocks entries (nulls before the window included).
    most = std::min(most, (num_hit_blocks + free_after) * block_size_ - reused);
  }
  return std::max<int64_t>(0, most);
}

void KvCacheManager::append(SequenceKv& seq, int64_t num_new_tokens) {
  if (seq.block_tables.empty()) {
    seq.block_tables.assign(pools_.size(), {});
    seq.first_held_block.assign(pools_.size(), 0);
  }
  const int64_t needed = blocks_for(seq.num_computed() + num_new_tokens);
  for (size_t p = 0; p < pools_.size(); ++p) {
    std::vector<int32_t>& table = seq.block_tables[p];
    while (static_cast<int64_t>(table.size()) < needed) table.push_back(pools_[p].allocate(copies_[p]));
  }
}

void KvCacheManager::commit(SequenceKv& seq, std::span<const int32_t> tokens) {
  TIDE_CHECK(!seq.block_tables.empty());  // append() came first
  seq.tokens.insert(seq.tokens.end(), tokens.begin(), tokens.end());
  TIDE_CHECK(blocks_for(seq.num_computed()) <= static_cast<int64_t>(seq.block_tables.front().size()));
  const int64_t num_full = seq.num_computed() / block_size_;
  while (static_cast<int64_t>(seq.block_keys.size()) < num_full) {
    const size_t j = seq.block_keys.size();
    const BlockKey& parent = j == 0 ? root_key_ : seq.block_keys.back();
    seq.block_keys.push_back(chain_block_key(
        parent, std::span<const int32_t>(seq.tokens).subspan(j * static_cast<size_t>(block_size_), static_cast<size_t>(block_size_))));
    if (!prefix_caching_) continue;
    for (size_t p = 0; p < pools_.size(); ++p) {
      const int32_t block = seq.block_tables[p][j];
      if (block != kNullBlock) pools_[p].register_key(block, seq.block_keys.back());
    }
  }
  release_out_of_window(seq);
}

void KvCacheManager::release_out_of_window(SequenceKv& seq) {
  for (int p = 0; p < num_pools(); ++p) {
    const int64_t upto = first_block_read(p, seq.num_computed());  // the next token reads from here on
    std::vector<int32_t>& table = seq.block_tables[static_cast<size_t>(p)];
    int64_t& first = seq.first_held_block[static_cast<size_t>(p)];
    for (; first < upto; ++first) {
      int32_t& block = table[static_cast<size_t>(first)];
      if (block != kNullBlock) pools_[static_cast<size_t>(p)].release(block);
      block = kNullBlock;
    }
  }
}

void KvCacheManager::free(SequenceKv& seq) {
  for (size_t p = 0; p < seq.block_tables.size(); ++p) {
    // Tail first: the end of a chain is evicted before its start, which more prompts share.
    for (auto it = seq.block_tables[p].rbegin(); it != seq.block_tables[p].rend(); ++it) {
      if (*it != kNullBlock) pools_[p].release(*it);
    }
  }
  seq = SequenceKv{};
}

std::vector<BlockCopy> KvCacheManager::take_copies(int pool) {
  std::vector<BlockCopy> out;
  out.swap(copies_[static_cast<size_t>(pool)]);
  return out;
}

void KvCacheManager::check_invariants(std::span<const SequenceKv* const> live) const {
  for (int p = 0; p < num_pools(); ++p) {
    const BlockPool& bp = pool(p);
    bp.check_invariants();
    std::vector<int32_t> refs(static_cast<size_t>(bp.num_blocks()), 0);
    for (const SequenceKv* seq : live) {
      const std::vector<int32_t>& table = seq->block_tables[static_cast<size_t>(p)];
      for (size_t j = 0; j < table.size(); ++j) {
        if (table[j] == kNullBlock) continue;
        if (static_cast<int64_t>(j) < seq->first_held_block[static_cast<size_t>(p)]) {
          fail("pool {}: block {} held before the sequence's first held block", p, j);
        }
        ++refs[static_cast<size_t>(table[j])];
      }
    }
    for (int32_t b = 0; b < bp.num_blocks(); ++b) {
      if (refs[static_cast<size_t>(b)] != bp.refcount(b)) {
        fail("pool {}: block {} has refcount {} but {} table references", p, b, bp.refcount(b), refs[static_cast<size_t>(b)]);
      }
    }
  }
}

}  // namespace tide
