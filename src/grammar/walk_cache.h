// WalkCache: the stack sets met while classifying the vocabulary at one position, interned, with their byte
// transitions memoized, so the walk is a DFA built on the fly: a string body's state after any character is
// the same set, and after the first few tokens most steps are a table lookup instead of a step over stacks.
// Bounded (kMaxStates); the caller starts over when it is full.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/stack_set.h"

namespace tide::grammar::detail {

class WalkCache {
 public:
  static constexpr size_t kMaxStates = 4096;
  static constexpr int32_t kUnknown = -1;
  static constexpr int32_t kFull = -2;  // step() could not add a state: the cache is full

  explicit WalkCache(const ByteGrammar& g) : g_(g) {}

  void clear() {
    sets_.clear();
    next_.clear();
    ids_.clear();
    ready_.clear();
    end_.clear();
  }
  // The id of `set` (added if new), or kFull.
  int32_t intern(const StackSet& set) {
    std::string key = set.key();
    if (const auto it = ids_.find(key); it != ids_.end()) return it->second;
    if (sets_.size() >= kMaxStates) return kFull;
    const auto id = static_cast<int32_t>(sets_.size());
    sets_.push_back(set);
    std::array<int32_t, 256> row;
    row.fill(kUnknown);
    next_.push_back(row);
    ready_.push_back(set.count() > 0);
    end_.push_back(set.has_end());
    ids_.emplace(std::move(key), id);
    return id;
  }
  // The state after `byte` from state `id`, or kFull.
  int32_t step(int32_t id, uint8_t byte) {
    const int32_t known = next_[static_cast<size_t>(id)][byte];
    if (known != kUnknown) return known;
    detail::step(g_, sets_[static_cast<size_t>(id)], byte, scratch_);
    const int32_t to = intern(scratch_);
    if (to != kFull) next_[static_cast<size_t>(id)][byte] = to;
    return to;
  }
  bool ready(int32_t id) const { return ready_[static_cast<size_t>(id)] != 0; }  // some stack can go on
  bool has_end(int32_t id) const { return end_[static_cast<size_t>(id)] != 0; }
  bool dead(int32_t id) const { return !ready(id) && !has_end(id); }

 private:
  const ByteGrammar& g_;
  std::vector<StackSet> sets_;
  std::vector<std::array<int32_t, 256>> next_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<char> ready_, end_;
  StackSet scratch_;
};

}  // namespace tide::grammar::detail
