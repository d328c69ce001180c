// StackSet: the matcher's state, the set of parse stacks still possible after the bytes so far (the grammar
// may be ambiguous), each stack a list of ByteGrammar nodes whose top is ready to consume a byte, plus a flag
// for "the root rule has completed" (the text so far is in the language). Stored flat, deduplicated as
// stacks are added, bounded in count and depth so that an exploding grammar is refused (GrammarError)
// instead of exhausting memory.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "grammar/byte_grammar.h"

namespace tide::grammar::detail {

inline constexpr uint32_t kMaxStacks = 2048;
inline constexpr uint32_t kMaxStackDepth = 20'000;

class StackSet {
 public:
  void clear() {
    data_.clear();
    offsets_.clear();
    hashes_.clear();
    has_end_ = false;
  }
  uint32_t count() const { return static_cast<uint32_t>(offsets_.size()); }
  bool has_end() const { return has_end_; }
  void set_end() { has_end_ = true; }
  // No stack and no completed root: nothing can follow, the bytes were rejected.
  bool dead() const { return offsets_.empty() && !has_end_; }
  std::span<const int32_t> stack(uint32_t i) const {
    const uint32_t off = offsets_[i];
    return {data_.data() + off + 1, static_cast<size_t>(data_[off])};
  }
  int32_t top(uint32_t i) const {
    const uint32_t off = offsets_[i];
    return data_[off + static_cast<uint32_t>(data_[off])];
  }

  // Adds base + pushes + {ready} unless the same stack is present.
  void add(std::span<const int32_t> base, std::span<const int32_t> pushes, int32_t ready);
  // Canonical text of the set (stacks sorted), equal for equal sets: the mask cache's key.
  std::string key() const;

 private:
  std::vector<int32_t> data_;      // per stack: frame count, frames bottom..top
  std::vector<uint32_t> offsets_;  // per stack: where it starts in data_
  std::vector<uint64_t> hashes_;   // per stack, to find duplicates
  bool has_end_ = false;
};

// Moves onto `node` above `base` (enters it, ByteGrammar): adds every resulting stack to `out`, following rule
// completions down through `base`; a completion below the bottom sets out's end flag.
void enter(const ByteGrammar& g, std::span<const int32_t> base, int32_t node, StackSet& out);
// The state before any byte: the root rule entered on an empty stack.
void initial_state(const ByteGrammar& g, StackSet& out);
// `out` = the stacks of `in` after consuming `byte` (cleared first).
void step(const ByteGrammar& g, const StackSet& in, uint8_t byte, StackSet& out);

}  // namespace tide::grammar::detail
