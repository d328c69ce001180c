// KvCacheManager: one BlockPool per layer group (window) and each sequence's block table per group.
// Block tables are indexed by logical block = position / block_size; there are no cyclic buffers.
// This is the simple manager (allocate, append, free; no reuse, no out-of-window release); the window-aware
// manager of design/kv-cache.md replaces its internals behind the same vocabulary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kv/block_pool.h"

namespace tide {

inline constexpr int32_t kNoBlock = -1;  // same value as backend's kNullBlock: a table entry with no memory

struct PoolSpec {
  int64_t window = 0;  // 0: global
  int32_t num_blocks = 0;
};

// The KV state of one sequence: a block table per pool, and how many positions have blocks.
struct SequenceKv {
  std::vector<std::vector<int32_t>> block_tables;  // [num_pools][num_logical_blocks]
  int64_t num_tokens = 0;                          // positions [0, num_tokens) have blocks
};

class KvCacheManager {
 public:
  KvCacheManager(int64_t block_size, std::vector<PoolSpec> pools);

  int64_t block_size() const { return block_size_; }
  int num_pools() const { return static_cast<int>(pools_.size()); }
  const BlockPool& pool(int i) const { return pools_[static_cast<size_t>(i)]; }
  const PoolSpec& spec(int i) const { return specs_[static_cast<size_t>(i)]; }

  SequenceKv create_sequence() const;
  // True when every pool has the blocks to extend `seq` to `num_tokens` positions. Does not mutate.
  bool can_allocate(const SequenceKv& seq, int64_t num_tokens) const;
  // Extends `seq` so positions [0, num_tokens) have blocks in every pool. Throws tide::Error (and changes
  // nothing) when a pool is out of blocks.
  void allocate(SequenceKv& seq, int64_t num_tokens);
  // Returns all of `seq`'s blocks to their pools and empties it.
  void free(SequenceKv& seq);

 private:
  int64_t blocks_for(int64_t num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  int64_t block_size_;
  std::vector<PoolSpec> specs_;
  std::vector<BlockPool> pools_;
};

}  // namespace tide
