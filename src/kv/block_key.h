// BlockKey: the identity of a full KV block's content. A block's K/V depend only on the tokens up to its
// end (and on anything else that changes KV, e.g. a cache salt), so the key is a hash chain:
// key_i = H(key_{i-1}, tokens of block i), starting from a root made of the extra keys. The same key
// names the block in every pool. 128-bit XXH3: a collision, which would silently change an output, is
// out of reach in practice (2^-64 for 2^32 blocks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tide {

struct BlockKey {
  uint64_t lo = 0;
  uint64_t hi = 0;

  bool operator==(const BlockKey&) const = default;
};

struct BlockKeyHash {
  size_t operator()(const BlockKey& k) const { return static_cast<size_t>(k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull)); }
};

// The chain's root: what, besides the tokens, decides the KV content (0 when nothing does).
BlockKey root_block_key(uint64_t extra_key);
// key_i from key_{i-1} and the block_size tokens of block i.
BlockKey chain_block_key(const BlockKey& parent, std::span<const int32_t> tokens);

}  // namespace tide
