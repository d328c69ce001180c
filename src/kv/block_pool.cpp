#include "kv/block_pool.h"

#include "core/error.h"

namespace tide {

BlockPool::BlockPool(int32_t num_blocks) : in_use_(static_cast<size_t>(num_blocks), false) {
  TIDE_CHECK(num_blocks >= 0);
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

int32_t BlockPool::allocate() {
  if (free_.empty()) fail("KV block pool exhausted ({} blocks)", num_blocks());
  const int32_t block = free_.back();
  free_.pop_back();
  in_use_[static_cast<size_t>(block)] = true;
  return block;
}

void BlockPool::free(int32_t block) {
  TIDE_CHECK(block >= 0 && block < num_blocks() && in_use_[static_cast<size_t>(block)]);
  in_use_[static_cast<size_t>(block)] = false;
  free_.push_back(block);
}

}  // namespace tide
