// RulePlan: what ByteGrammar's construction decides about a Grammar's rules before building the network.
// - Alternatives that can match nothing (an empty character class, a rule without a finite derivation) are
//   dropped.
// - Rules with the same structure are merged (coarsest partition: same alternatives, with references to rules
//   of the same class), so the repetition rules a compiler emits per use (`star ::= char star | ""` for
//   every string property) become one rule, one set of positions, and one vocabulary classification.
// - Small rules that are not recursive are inlined into their callers, so that a rule frame is a substantial
//   piece of the grammar (a whole string body rather than one character): the vocabulary classification of a
//   position then decides most tokens by itself.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/grammar.h"

namespace tide::grammar::detail {

// Largest rule (in bytes of literals, character classes and references, after its own inlining) inlined
// into its callers.
inline constexpr size_t kInlineBudget = 64;

struct RulePlan {
  std::vector<int32_t> rep;               // per rule: the representative of its class (itself when unmerged)
  std::vector<std::vector<char>> alt_ok;  // per rule and alternative: can match something
  std::vector<char> inlined;              // per rule: built into its callers instead of being called
};

// Throws GrammarError when the root matches nothing. Expects a validated grammar.
RulePlan plan_rules(const Grammar& g);

}  // namespace tide::grammar::detail
