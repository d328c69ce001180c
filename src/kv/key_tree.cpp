#include "kv/key_tree.h"

#include <algorithm>

#include "core/error.h"

namespace tide {

void KeyTree::hold(const BlockKey& key, const std::optional<BlockKey>& parent) {
  const auto [it, added] = nodes_.try_emplace(key);
  ++it->second.holders;
  ++num_holders_;
  if (!added) return;
  it->second.parent = parent;
  if (parent) {
    // A parent nobody holds any more still links its children until they go.
    nodes_[*parent].children.push_back(key);
  }
}

void KeyTree::drop(const BlockKey& key) {
  const auto it = nodes_.find(key);
  TIDE_CHECK(it != nodes_.end() && it->second.holders > 0);
  --it->second.holders;
  --num_holders_;
  remove_if_unused(key);
}

void KeyTree::remove_if_unused(BlockKey key) {
  while (true) {
    const auto it = nodes_.find(key);
    if (it == nodes_.end() || it->second.holders > 0 || !it->second.children.empty()) return;
    const std::optional<BlockKey> parent = it->second.parent;
    nodes_.erase(it);
    if (!parent) return;
    std::vector<BlockKey>& siblings = nodes_.at(*parent).children;
    siblings.erase(std::find(siblings.begin(), siblings.end(), key));
    key = *parent;
  }
}

std::vector<BlockKey> KeyTree::subtree(const BlockKey& key) const {
  std::vector<BlockKey> out;
  if (!nodes_.count(key)) return out;
  out.push_back(key);
  for (size_t i = 0; i < out.size(); ++i) {
    const Node& n = nodes_.at(out[i]);
    out.insert(out.end(), n.children.begin(), n.children.end());
  }
  return out;
}

std::optional<BlockKey> KeyTree::parent(const BlockKey& key) const {
  const auto it = nodes_.find(key);
  return it == nodes_.end() ? std::nullopt : it->second.parent;
}

int32_t KeyTree::holders(const BlockKey& key) const {
  const auto it = nodes_.find(key);
  return it == nodes_.end() ? 0 : it->second.holders;
}

}  // namespace tide
