// BlockPool: the free list of one KV pool's physical blocks. Knows nothing about tokens or layers.
// Non-goals (next issue): refcounts, cached/evictable blocks, LRU, host tier.
#pragma once

#include <cstdint>
#include <vector>

namespace tide {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(in_use_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_in_use() const { return num_blocks() - num_free(); }

  // Takes a free block. Throws tide::Error when none is free (callers check num_free() first).
  int32_t allocate();
  // Returns a block taken by allocate(). Throws on a block that is not in use (a double free is a bug).
  void free(int32_t block);

 private:
  std::vector<int32_t> free_;  // LIFO: recently freed blocks are reused first (warm in cache)
  std::vector<bool> in_use_;
};

}  // namespace tide
