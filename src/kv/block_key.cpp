#include "kv/block_key.h"

#include <xxhash.h>

#include <cstring>
#include <vector>

namespace tide {

BlockKey root_block_key(uint64_t extra_key) {
  const XXH128_hash_t h = XXH3_128bits_withSeed(&extra_key, sizeof extra_key, 0x74696465ull);  // "tide"
  return BlockKey{h.low64, h.high64};
}

BlockKey chain_block_key(const BlockKey& parent, std::span<const int32_t> tokens) {
  std::vector<unsigned char> bytes(sizeof parent + tokens.size_bytes());
  std::memcpy(bytes.data(), &parent, sizeof parent);
  std::memcpy(bytes.data() + sizeof parent, tokens.data(), tokens.size_bytes());
  const XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  return BlockKey{h.low64, h.high64};
}

}  // namespace tide
