// LruList: an intrusive doubly linked list over ids 0..n-1 with O(1) push to either end, removal and
// membership. Front = evicted first. Used for a pool's free queue and its host tier.
#pragma once

#include <cstdint>
#include <vector>

namespace tide {

class LruList {
 public:
  explicit LruList(int32_t capacity)
      : prev_(static_cast<size_t>(capacity), kNone), next_(static_cast<size_t>(capacity), kNone),
        linked_(static_cast<size_t>(capacity), false) {}

  bool empty() const { return head_ == kNone; }
  int32_t size() const { return size_; }
  int32_t front() const { return head_; }
  bool contains(int32_t id) const { return linked_[static_cast<size_t>(id)]; }

  void push_front(int32_t id) {
    link(id, kNone, head_);
  }
  void push_back(int32_t id) { link(id, tail_, kNone); }

  void remove(int32_t id) {
    const size_t i = static_cast<size_t>(id);
    if (prev_[i] != kNone) next_[static_cast<size_t>(prev_[i])] = next_[i]; else head_ = next_[i];
    if (next_[i] != kNone) prev_[static_cast<size_t>(next_[i])] = prev_[i]; else tail_ = prev_[i];
    prev_[i] = next_[i] = kNone;
    linked_[i] = false;
    --size_;
  }

 private:
  static constexpr int32_t kNone = -1;

  void link(int32_t id, int32_t before, int32_t after) {
    const size_t i = static_cast<size_t>(id);
    prev_[i] = before;
    next_[i] = after;
    if (before != kNone) next_[static_cast<size_t>(before)] = id; else head_ = id;
    if (after != kNone) prev_[static_cast<size_t>(after)] = id; else tail_ = id;
    linked_[i] = true;
    ++size_;
  }

  std::vector<int32_t> prev_, next_;
  std::vector<bool> linked_;
  int32_t head_ = kNone, tail_ = kNone, size_ = 0;
};

}  // namespace tide
