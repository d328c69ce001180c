// Helpers shared by the BlockPool tests: made-up keys and copy lists compared as tuples.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "kv/block_pool.h"

namespace tide::test {

using Dir = BlockCopy::Direction;

inline BlockKey key(uint64_t i) { return BlockKey{i, ~i}; }

// Exact comparison of copy lists with readable failures.
inline std::vector<std::tuple<Dir, int32_t, int32_t>> as_tuples(const std::vector<BlockCopy>& copies) {
  std::vector<std::tuple<Dir, int32_t, int32_t>> out;
  for (const BlockCopy& c : copies) out.emplace_back(c.direction, c.device_block, c.host_block);
  return out;
}

}  // namespace tide::test
