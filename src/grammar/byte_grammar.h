// ByteGrammar: a Grammar compiled to bytes as a recursive transition network. Each rule is a small automaton
// whose nodes are positions inside the rule; its edges consume one byte in a range, or call another rule and
// continue at a return node. Literals become chains of byte edges (alternatives sharing a literal prefix share
// the nodes), character classes their UTF-8 byte-range sequences. A parse stack is a list of nodes: return
// nodes below, the current position on top.
//
// "Entering" a node means moving to it and following every call and rule completion that consumes nothing,
// until positions that consume a byte are reached; that work is precomputed per node as its expansions
// (frames to push, ending with a ready node that has byte edges) and whether its rule can complete (the frame
// pops, the caller goes on at its return node). A return node with nothing after it (the rule's end) is never
// pushed, so right recursion (`s ::= x s | ""`) keeps the stack flat.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace tide::grammar::detail {

struct ByteEdge {
  uint8_t lo = 0, hi = 0;
  int32_t target = -1;
};

struct Expansion {
  uint32_t push_begin = 0;  // into pushes()
  uint32_t push_count = 0;
  int32_t ready = -1;  // the node on top, which has byte edges
};

// Bounds on the precomputed expansions (grammars that exceed them are refused as too ambiguous).
inline constexpr size_t kMaxExpansionsPerNode = 4096;
inline constexpr size_t kMaxExpansionFrames = 8'000'000;
inline constexpr size_t kMaxExpansionDepth = 256;         // rules entered before the first byte
inline constexpr size_t kMaxExpansionWork = 20'000'000;   // search steps over all nodes

class ByteGrammar {
 public:
  // Validates the grammar, drops alternatives that can match nothing (empty character classes and rules
  // without a finite derivation), and builds the network. Throws GrammarError.
  explicit ByteGrammar(const Grammar& grammar);

  int32_t node_count() const { return static_cast<int32_t>(edge_begin_.size() - 1); }
  std::span<const ByteEdge> edges(int32_t node) const {
    return {edges_.data() + edge_begin_[static_cast<size_t>(node)],
            edges_.data() + edge_begin_[static_cast<size_t>(node) + 1]};
  }
  std::span<const Expansion> expansions(int32_t node) const {
    return {expansions_.data() + expansion_begin_[static_cast<size_t>(node)],
            expansions_.data() + expansion_begin_[static_cast<size_t>(node) + 1]};
  }
  std::span<const int32_t> pushes(const Expansion& e) const { return {pushes_.data() + e.push_begin, e.push_count}; }
  bool can_return(int32_t node) const { return can_return_[static_cast<size_t>(node)] != 0; }
  // Whether `byte` can come right after the rule that `node` belongs to completes, in some context (the
  // static follow set): a token that completes the rule and goes on with another byte needs its context.
  bool may_follow(int32_t node, uint8_t byte) const {
    const auto& set = follow_[static_cast<size_t>(node_rule_[static_cast<size_t>(node)])];
    return (set[byte >> 6] >> (byte & 63)) & 1u;
  }
  // The node entered at the start: the root rule's first position.
  int32_t start_node() const { return start_node_; }
  // Name of the rule a node belongs to (debugging).
  const std::string& rule_name(int32_t node) const { return rule_names_[static_cast<size_t>(node_rule_[static_cast<size_t>(node)])]; }

 private:
  struct Call {
    int32_t callee_start = -1;
    int32_t ret = -1;  // -1: the return node is the rule's end, nothing is pushed
  };
  struct Builder;
  void compute_expansions(const std::vector<std::vector<Call>>& calls, const std::vector<std::vector<int32_t>>& eps,
                          const std::vector<char>& accept);
  void compute_follow(const std::vector<std::vector<Call>>& calls);

  std::vector<ByteEdge> edges_;
  std::vector<uint32_t> edge_begin_;
  std::vector<Expansion> expansions_;
  std::vector<uint32_t> expansion_begin_;
  std::vector<int32_t> pushes_;
  std::vector<char> can_return_;
  std::vector<int32_t> node_rule_;                   // the rule whose frame a node is in (after inlining)
  std::vector<std::array<uint64_t, 4>> follow_;     // per rule: bytes that may follow its completion
  std::vector<std::string> rule_names_;
  int32_t start_node_ = -1;
};

}  // namespace tide::grammar::detail
