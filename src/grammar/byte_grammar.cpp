#include "grammar/byte_grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "grammar/rule_plan.h"
#include "grammar/utf8_ranges.h"

namespace tide::grammar::detail {

// Builds the nodes of rules, with inlined rules spliced into their callers.
struct ByteGrammar::Builder {
  const Grammar& g;
  const RulePlan& plan;
  ByteGrammar& out;
  std::vector<std::vector<ByteEdge>> edges;
  std::vector<std::vector<Call>> calls;
  std::vector<std::vector<int32_t>> eps;
  std::vector<char> accept;
  std::vector<int32_t> start, end;
  std::vector<int32_t> pending;                       // called rules still to build
  std::unordered_map<uint64_t, int32_t> literal_child;  // (node, byte) -> shared node of a literal prefix

  int32_t new_node(int32_t rule) {
    edges.emplace_back();
    calls.emplace_back();
    eps.emplace_back();
    accept.push_back(0);
    out.node_rule_.push_back(rule);
    if (edges.size() > kMaxElements * 4) throw GrammarError("grammar too large to compile");
    return static_cast<int32_t>(edges.size() - 1);
  }

  // The start node of a called (not inlined) rule, queued for building on first use.
  int32_t callee(int32_t rule) {
    const auto r = static_cast<size_t>(rule);
    if (start[r] < 0) {
      start[r] = new_node(rule);
      end[r] = new_node(rule);
      accept[static_cast<size_t>(end[r])] = 1;
      pending.push_back(rule);
    }
    return start[r];
  }

  // The alternatives of `rule` from node `from` to node `to`, in the frame of rule `host`.
  void build(int32_t rule, int32_t from, int32_t to, int32_t host, int depth) {
    const auto r = static_cast<size_t>(rule);
    for (size_t a = 0; a < g.rules[r].alternatives.size(); ++a) {
      if (!plan.alt_ok[r][a]) continue;
      const Sequence& seq = g.rules[r].alternatives[a];
      int32_t cur = from;
      if (seq.empty()) eps[static_cast<size_t>(from)].push_back(to);
      for (size_t i = 0; i < seq.size(); ++i) {
        const Element& e = seq[i];
        const bool last = i + 1 == seq.size();
        if (e.kind == Element::Kind::kLiteral) {
          for (size_t j = 0; j < e.bytes.size(); ++j) {
            const auto b = static_cast<uint8_t>(e.bytes[j]);
            if (last && j + 1 == e.bytes.size()) {
              edges[static_cast<size_t>(cur)].push_back({b, b, to});
              cur = to;
              continue;
            }
            auto [it, fresh] = literal_child.try_emplace((static_cast<uint64_t>(cur) << 8) | b, -1);
            if (fresh) {
              it->second = new_node(host);
              edges[static_cast<size_t>(cur)].push_back({b, b, it->second});
            }
            cur = it->second;
          }
        } else if (e.kind == Element::Kind::kCharClass) {
          const int32_t target = last ? to : new_node(host);
          std::map<std::tuple<int32_t, uint8_t, uint8_t>, int32_t> shared;  // prefixes of the byte sequences
          for (const ByteRangeSeq& s : utf8_sequences(normalize_class(e.ranges, e.negated))) {
            int32_t node = cur;
            for (size_t j = 0; j + 1 < s.size(); ++j) {
              auto [it, fresh] = shared.try_emplace({node, s[j].lo, s[j].hi}, -1);
              if (fresh) {
                it->second = new_node(host);
                edges[static_cast<size_t>(node)].push_back({s[j].lo, s[j].hi, it->second});
              }
              node = it->second;
            }
            edges[static_cast<size_t>(node)].push_back({s.back().lo, s.back().hi, target});
          }
          cur = target;
        } else {
          const int32_t c = plan.rep[static_cast<size_t>(e.rule)];
          const int32_t target = last ? to : new_node(host);
          if (plan.inlined[static_cast<size_t>(c)] && depth < static_cast<int>(kInlineBudget)) {
            build(c, cur, target, host, depth + 1);
          } else {
            // A call whose return node is the rule's end pushes nothing (tail call).
            const bool tail = last && to == end[static_cast<size_t>(host)];
            const int32_t callee_start = callee(c);  // may add nodes: before indexing calls
            calls[static_cast<size_t>(cur)].push_back({callee_start, tail ? -1 : target});
          }
          cur = target;
        }
      }
    }
  }
};

ByteGrammar::ByteGrammar(const Grammar& g) {
  g.validate();
  const RulePlan plan = plan_rules(g);
  for (const Rule& r : g.rules) rule_names_.push_back(r.name);
  Builder b{g, plan, *this, {}, {}, {}, {}, std::vector<int32_t>(g.rules.size(), -1),
            std::vector<int32_t>(g.rules.size(), -1), {}, {}};
  start_node_ = b.callee(g.root);
  while (!b.pending.empty()) {
    const int32_t rule = b.pending.back();
    b.pending.pop_back();
    b.build(rule, b.start[static_cast<size_t>(rule)], b.end[static_cast<size_t>(rule)], rule, 0);
  }
  // Flatten the edges; ranges to one target are merged.
  edge_begin_.push_back(0);
  for (auto& list : b.edges) {
    std::sort(list.begin(), list.end(), [](const ByteEdge& x, const ByteEdge& y) {
      return x.target != y.target ? x.target < y.target : x.lo < y.lo;
    });
    std::vector<ByteEdge> merged;
    for (const ByteEdge& e : list) {
      if (!merged.empty() && merged.back().target == e.target && e.lo <= merged.back().hi + 1) {
        merged.back().hi = std::max(merged.back().hi, e.hi);
      } else {
        merged.push_back(e);
      }
    }
    std::sort(merged.begin(), merged.end(), [](const ByteEdge& x, const ByteEdge& y) { return x.lo < y.lo; });
    edges_.insert(edges_.end(), merged.begin(), merged.end());
    edge_begin_.push_back(static_cast<uint32_t>(edges_.size()));
  }
  compute_expansions(b.calls, b.eps, b.accept);
  compute_follow(b.calls);
}

void ByteGrammar::compute_follow(const std::vector<std::vector<Call>>& calls) {
  // FOLLOW(callee) gets the first bytes of each return node, and FOLLOW(caller) where the return node (or a
  // tail call) lets the caller complete too; iterated to a fixpoint.
  const size_t n = calls.size();
  std::vector<std::array<uint64_t, 4>> first(n, std::array<uint64_t, 4>{});
  for (size_t v = 0; v < n; ++v) {
    for (const Expansion& e : expansions(static_cast<int32_t>(v))) {
      for (const ByteEdge& edge : edges(e.ready)) {
        for (unsigned c = edge.lo; c <= edge.hi; ++c) first[v][c >> 6] |= 1ull << (c & 63);
      }
    }
  }
  follow_.assign(rule_names_.size(), std::array<uint64_t, 4>{});
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t v = 0; v < n; ++v) {
      const auto host = static_cast<size_t>(node_rule_[v]);
      for (const Call& c : calls[v]) {
        auto& f = follow_[static_cast<size_t>(node_rule_[static_cast<size_t>(c.callee_start)])];
        for (int w = 0; w < 4; ++w) {
          uint64_t add = 0;
          if (c.ret >= 0) add |= first[static_cast<size_t>(c.ret)][w];
          if (c.ret < 0 || can_return(c.ret)) add |= follow_[host][w];
          if ((f[w] | add) != f[w]) {
            f[w] |= add;
            changed = true;
          }
        }
      }
    }
  }
}

void ByteGrammar::compute_expansions(const std::vector<std::vector<Call>>& calls,
                                     const std::vector<std::vector<int32_t>>& eps, const std::vector<char>& accept) {
  const size_t n = calls.size();
  can_return_.assign(n, 0);
  expansion_begin_.push_back(0);
  // Depth-first over (node, frames pushed so far); a pair seen before adds nothing new.
  struct Item {
    int32_t node;
    std::vector<int32_t> pushed;
  };
  std::vector<Item> work;
  std::unordered_set<std::string> seen;
  std::string key;
  size_t work_done = 0;
  for (size_t u = 0; u < n; ++u) {
    work.clear();
    seen.clear();
    work.push_back({static_cast<int32_t>(u), {}});
    size_t emitted = 0;
    while (!work.empty()) {
      Item item = std::move(work.back());
      work.pop_back();
      key.assign(reinterpret_cast<const char*>(&item.node), sizeof(int32_t));
      key.append(reinterpret_cast<const char*>(item.pushed.data()), item.pushed.size() * sizeof(int32_t));
      if (!seen.insert(key).second) continue;
      if (++work_done > kMaxExpansionWork) throw GrammarError("grammar too complex to compile");
      if (seen.size() > kMaxExpansionsPerNode * 16) {
        throw GrammarError(fmt::format("grammar too ambiguous: rule '{}' has too many ways to start", rule_name(static_cast<int32_t>(u))));
      }
      const auto v = static_cast<size_t>(item.node);
      if (edge_begin_[v + 1] > edge_begin_[v]) {
        if (++emitted > kMaxExpansionsPerNode) {
          throw GrammarError(fmt::format("grammar too ambiguous: rule '{}' has more than {} parse stacks before its first character",
                                         rule_name(static_cast<int32_t>(u)), kMaxExpansionsPerNode));
        }
        expansions_.push_back({static_cast<uint32_t>(pushes_.size()), static_cast<uint32_t>(item.pushed.size()), item.node});
        pushes_.insert(pushes_.end(), item.pushed.begin(), item.pushed.end());
        if (pushes_.size() > kMaxExpansionFrames) throw GrammarError("grammar too large: its parse stacks exceed the limit");
      }
      if (accept[v]) {
        if (item.pushed.empty()) {
          can_return_[u] = 1;
        } else {
          const int32_t ret = item.pushed.back();
          item.pushed.pop_back();
          work.push_back({ret, item.pushed});
          item.pushed.push_back(ret);
        }
      }
      for (const int32_t target : eps[v]) work.push_back({target, item.pushed});
      for (const Call& c : calls[v]) {
        std::vector<int32_t> pushed = item.pushed;
        if (c.ret >= 0) pushed.push_back(c.ret);
        if (pushed.size() > kMaxExpansionDepth) {
          throw GrammarError(fmt::format("grammar nests more than {} rules before a character (at rule '{}')",
                                         kMaxExpansionDepth, rule_name(c.callee_start)));
        }
        work.push_back({c.callee_start, std::move(pushed)});
      }
    }
    expansion_begin_.push_back(static_cast<uint32_t>(expansions_.size()));
  }
}

}  // namespace tide::grammar::detail
