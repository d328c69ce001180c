// KeyTree: the chain structure of the block keys the KV arena holds. A key's parent is the key of the block
// before it in its sequence (none for block 0), so the cached keys form a forest of prefixes. The arena uses
// it to find every key below one that can no longer be served (docs/design/kv-cache.md, "Eviction across
// groups"). A node lives while some group holds its key (on the device or the host tier) or while it has
// children; it counts holders only, never which group or block.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kv/block_key.h"

namespace tide {

class KeyTree {
 public:
  // One more holder of `key`; a new node is linked under `parent` (nullopt: the first block of a chain).
  void hold(const BlockKey& key, const std::optional<BlockKey>& parent);
  // One holder less; a node with no holder and no child goes, and so do its ancestors that are left the same.
  void drop(const BlockKey& key);
  // `key` and every key below it, parents before children. Does not mutate.
  std::vector<BlockKey> subtree(const BlockKey& key) const;
  int32_t holders(const BlockKey& key) const;
  // The parent `key` was linked under (nullopt for a chain's first block or an unknown key).
  std::optional<BlockKey> parent(const BlockKey& key) const;
  // Holders of all keys together.
  int64_t num_holders() const { return num_holders_; }
  size_t size() const { return nodes_.size(); }

 private:
  struct Node {
    std::optional<BlockKey> parent;
    std::vector<BlockKey> children;
    int32_t holders = 0;
  };
  void remove_if_unused(BlockKey key);

  std::unordered_map<BlockKey, Node, BlockKeyHash> nodes_;
  int64_t num_holders_ = 0;
};

}  // namespace tide
