#include "grammar/rule_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "grammar/rule_fixpoint.h"
#include "grammar/utf8_ranges.h"

namespace tide::grammar::detail {

namespace {

// Productive rules and alternatives, given which character classes are non-empty.
void mark_productive(const Grammar& g, RulePlan& plan) {
  const size_t n = g.rules.size();
  std::vector<std::vector<std::vector<char>>> terminal_ok(n);
  for (size_t r = 0; r < n; ++r) {
    for (const Sequence& seq : g.rules[r].alternatives) {
      std::vector<char> ok(seq.size(), 1);
      for (size_t i = 0; i < seq.size(); ++i) {
        if (seq[i].kind == Element::Kind::kCharClass) ok[i] = !normalize_class(seq[i].ranges, seq[i].negated).empty();
      }
      terminal_ok[r].push_back(std::move(ok));
    }
  }
  const std::vector<char> productive =
      mark_rules(g, [&](size_t r, size_t a, size_t i) { return terminal_ok[r][a][i] != 0; });
  const auto alt_ok = [&](size_t r, size_t a) {
    const Sequence& seq = g.rules[r].alternatives[a];
    for (size_t i = 0; i < seq.size(); ++i) {
      const Element& e = seq[i];
      if (e.kind == Element::Kind::kRule ? !productive[static_cast<size_t>(e.rule)] : !terminal_ok[r][a][i]) return false;
    }
    return true;
  };
  if (!productive[static_cast<size_t>(g.root)]) {
    throw GrammarError(fmt::format("grammar matches no text (rule '{}' has no finite derivation)",
                                   g.rules[static_cast<size_t>(g.root)].name));
  }
  plan.alt_ok.resize(n);
  for (size_t r = 0; r < n; ++r) {
    for (size_t a = 0; a < g.rules[r].alternatives.size(); ++a) plan.alt_ok[r].push_back(alt_ok(r, a) ? 1 : 0);
  }
}

// The call graph's strongly connected components (Tarjan, iteratively): which rules are recursive, and an
// order with every callee before its callers (except within a component).
struct CallGraph {
  std::vector<size_t> order;
  std::vector<char> recursive;
  std::vector<size_t> component_size;
};

CallGraph analyze_calls(const Grammar& g, const RulePlan& plan) {
  const size_t n = g.rules.size();
  std::vector<std::vector<size_t>> out(n);
  for (size_t r = 0; r < n; ++r) {
    for (size_t a = 0; a < g.rules[r].alternatives.size(); ++a) {
      if (!plan.alt_ok[r][a]) continue;
      for (const Element& e : g.rules[r].alternatives[a]) {
        if (e.kind == Element::Kind::kRule) out[r].push_back(static_cast<size_t>(e.rule));
      }
    }
  }
  CallGraph cg;
  cg.recursive.assign(n, 0);
  cg.component_size.assign(n, 0);
  std::vector<int64_t> index(n, -1), low(n, 0);
  std::vector<char> on_stack(n, 0);
  std::vector<size_t> stack;
  std::vector<std::pair<size_t, size_t>> call;  // (rule, next edge)
  int64_t counter = 0;
  for (size_t s = 0; s < n; ++s) {
    if (index[s] >= 0) continue;
    call.push_back({s, 0});
    index[s] = low[s] = counter++;
    stack.push_back(s);
    on_stack[s] = 1;
    while (!call.empty()) {
      const size_t v = call.back().first;
      size_t& edge = call.back().second;
      if (edge < out[v].size()) {
        const size_t w = out[v][edge++];
        if (w == v) cg.recursive[v] = 1;
        if (index[w] < 0) {
          index[w] = low[w] = counter++;
          stack.push_back(w);
          on_stack[w] = 1;
          call.push_back({w, 0});
        } else if (on_stack[w]) {
          low[v] = std::min(low[v], index[w]);
        }
        continue;
      }
      if (low[v] == index[v]) {
        std::vector<size_t> component;
        while (true) {
          const size_t w = stack.back();
          stack.pop_back();
          on_stack[w] = 0;
          component.push_back(w);
          if (w == v) break;
        }
        for (const size_t w : component) {
          if (component.size() > 1) cg.recursive[w] = 1;
          cg.component_size[w] = component.size();
          cg.order.push_back(w);
        }
      }
      call.pop_back();
      if (!call.empty()) low[call.back().first] = std::min(low[call.back().first], low[v]);
    }
  }
  return cg;
}

// Structurally equal rules merged, callees first: a rule's signature (kept alternatives, terminals, the
// classes of the rules it references, "self" for its own recursion) is final once its callees' are. Rules in
// a larger recursive component keep classes of their own.
void merge_equal_rules(const Grammar& g, const CallGraph& cg, RulePlan& plan) {
  const size_t n = g.rules.size();
  plan.rep.resize(n);
  std::iota(plan.rep.begin(), plan.rep.end(), 0);
  std::unordered_map<std::string, int32_t> classes;  // signature -> representative
  std::string sig;
  for (const size_t r : cg.order) {
    if (cg.component_size[r] > 1 || static_cast<int32_t>(r) == g.root) continue;
    sig.clear();
    const auto put = [&](const void* p, size_t len) { sig.append(static_cast<const char*>(p), len); };
    for (size_t a = 0; a < g.rules[r].alternatives.size(); ++a) {
      if (!plan.alt_ok[r][a]) continue;
      sig.push_back('|');
      for (const Element& e : g.rules[r].alternatives[a]) {
        if (e.kind == Element::Kind::kLiteral) {
          const auto len = static_cast<uint32_t>(e.bytes.size());
          sig.push_back('L');
          put(&len, sizeof len);
          sig += e.bytes;
        } else if (e.kind == Element::Kind::kCharClass) {
          const std::vector<CharRange> ranges = normalize_class(e.ranges, e.negated);
          const auto len = static_cast<uint32_t>(ranges.size());
          sig.push_back('C');
          put(&len, sizeof len);
          put(ranges.data(), ranges.size() * sizeof(CharRange));
        } else if (static_cast<size_t>(e.rule) == r) {
          sig.push_back('S');
        } else {
          sig.push_back('R');
          put(&plan.rep[static_cast<size_t>(e.rule)], sizeof(int32_t));
        }
      }
    }
    plan.rep[r] = classes.try_emplace(sig, static_cast<int32_t>(r)).first->second;
  }
}

// Non-recursive rules small enough (kInlineBudget, counting inlined callees) are inlined; never the root.
void choose_inlined(const Grammar& g, const CallGraph& cg, RulePlan& plan) {
  const size_t n = g.rules.size();
  plan.inlined.assign(n, 0);
  std::vector<size_t> size(n, 0);
  for (const size_t r : cg.order) {
    if (plan.rep[r] != static_cast<int32_t>(r)) continue;
    size_t total = 0;
    for (size_t a = 0; a < g.rules[r].alternatives.size() && total <= kInlineBudget; ++a) {
      if (!plan.alt_ok[r][a]) continue;
      for (const Element& e : g.rules[r].alternatives[a]) {
        if (e.kind == Element::Kind::kLiteral) {
          total += e.bytes.size();
        } else if (e.kind == Element::Kind::kCharClass) {
          total += 1;
        } else {
          const auto c = static_cast<size_t>(plan.rep[static_cast<size_t>(e.rule)]);
          total += plan.inlined[c] ? size[c] : 1;
        }
      }
    }
    size[r] = total;
    plan.inlined[r] = !cg.recursive[r] && total <= kInlineBudget && static_cast<int32_t>(r) != g.root;
  }
}

}  // namespace

RulePlan plan_rules(const Grammar& g) {
  RulePlan plan;
  mark_productive(g, plan);
  const CallGraph cg = analyze_calls(g, plan);
  merge_equal_rules(g, cg, plan);
  choose_inlined(g, cg, plan);
  return plan;
}

}  // namespace tide::grammar::detail
