// Rules with an alternative whose every element holds, where a rule reference holds when the referenced rule
// is marked: nullable rules (no terminal holds), productive rules (every non-empty terminal holds). A
// worklist over reverse references keeps it linear in the grammar's size (a fixpoint by passes would be
// quadratic on long chains of rules).
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/grammar.h"

namespace tide::grammar::detail {

// terminal_ok(rule, alternative, element index) for literal and class elements.
template <typename TerminalOk>
std::vector<char> mark_rules(const Grammar& g, TerminalOk&& terminal_ok) {
  const size_t n = g.rules.size();
  struct AltRef {
    uint32_t rule, alt;
  };
  std::vector<std::vector<AltRef>> used_by(n);  // rule -> alternatives referencing it (once per element)
  std::vector<std::vector<uint32_t>> missing(n);  // per alternative: references to unmarked rules left
  std::vector<char> marked(n, 0);
  std::vector<uint32_t> queue;
  for (size_t r = 0; r < n; ++r) {
    const auto& alts = g.rules[r].alternatives;
    missing[r].assign(alts.size(), 0);
    for (size_t a = 0; a < alts.size(); ++a) {
      bool dead = false;
      for (size_t i = 0; i < alts[a].size(); ++i) {
        const Element& e = alts[a][i];
        if (e.kind == Element::Kind::kRule) {
          if (e.rule < 0 || static_cast<size_t>(e.rule) >= n) {
            dead = true;
            continue;
          }
          used_by[static_cast<size_t>(e.rule)].push_back({static_cast<uint32_t>(r), static_cast<uint32_t>(a)});
          ++missing[r][a];
        } else if (!terminal_ok(r, a, i)) {
          dead = true;
        }
      }
      if (dead) {
        missing[r][a] = UINT32_MAX;  // never completes
      } else if (missing[r][a] == 0 && !marked[r]) {
        marked[r] = 1;
        queue.push_back(static_cast<uint32_t>(r));
      }
    }
  }
  while (!queue.empty()) {
    const uint32_t r = queue.back();
    queue.pop_back();
    for (const AltRef& use : used_by[r]) {
      uint32_t& left = missing[use.rule][use.alt];
      if (left == UINT32_MAX || left == 0) continue;
      if (--left == 0 && !marked[use.rule]) {
        marked[use.rule] = 1;
        queue.push_back(use.rule);
      }
    }
  }
  return marked;
}

}  // namespace tide::grammar::detail
