#include "kv/kv_cache_manager.h"

#include <algorithm>

#include "core/error.h"

namespace tide {

KvCacheManager::KvCacheManager(int64_t block_size, std::vector<PoolSpec> pools)
    : block_size_(block_size), specs_(std::move(pools)) {
  if (block_size_ <= 0) fail("block size must be positive, got {}", block_size_);
  for (const PoolSpec& s : specs_) pools_.emplace_back(s.num_blocks);
}

SequenceKv KvCacheManager::create_sequence() const {
  SequenceKv seq;
  seq.block_tables.resize(pools_.size());
  return seq;
}

bool KvCacheManager::can_allocate(const SequenceKv& seq, int64_t num_tokens) const {
  TIDE_CHECK(seq.block_tables.size() == pools_.size());
  for (size_t p = 0; p < pools_.size(); ++p) {
    const int64_t missing = blocks_for(num_tokens) - static_cast<int64_t>(seq.block_tables[p].size());
    if (missing > pools_[p].num_free()) return false;
  }
  return true;
}

void KvCacheManager::allocate(SequenceKv& seq, int64_t num_tokens) {
  if (!can_allocate(seq, num_tokens)) {
    fail("KV cache is full: {} positions do not fit (block size {})", num_tokens, block_size_);
  }
  for (size_t p = 0; p < pools_.size(); ++p) {
    std::vector<int32_t>& table = seq.block_tables[p];
    while (static_cast<int64_t>(table.size()) < blocks_for(num_tokens)) table.push_back(pools_[p].allocate());
  }
  seq.num_tokens = std::max(seq.num_tokens, num_tokens);
}

void KvCacheManager::free(SequenceKv& seq) {
  for (size_t p = 0; p < seq.block_tables.size(); ++p) {
    for (int32_t block : seq.block_tables[p]) {
      if (block != kNoBlock) pools_[p].free(block);
    }
    seq.block_tables[p].clear();
  }
  seq.num_tokens = 0;
}

}  // namespace tide
