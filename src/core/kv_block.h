// Plain data shared by the KV cache manager (kv/) and the backends: the null block-table entry and the
// description of a block copy between a pool's device storage and its host tier.
#pragma once

#include <cstdint>

namespace tide {

// Block-table entry with no memory behind it (released out of the window, or never needed). Never read.
inline constexpr int32_t kNullBlock = -1;

// One whole-block copy between device storage and the host tier of the same pool.
struct BlockCopy {
  enum class Direction : uint8_t { kToHost, kToDevice };
  Direction direction = Direction::kToHost;
  int32_t device_block = 0;
  int32_t host_block = 0;
};

}  // namespace tide
