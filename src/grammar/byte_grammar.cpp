#include "grammar/byte_grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "grammar/utf8_ranges.h"

namespace tide::grammar::detail {

namespace {

// Rules with a finite derivation ("productive"), given which character classes are non-empty.
std::vector<char> productive_rules(const Grammar& g, const std::vector<std::vector<std::vector<char>>>& element_ok) {
  std::vector<char> productive(g.rules.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g.rules.size(); ++r) {
      if (productive[r]) continue;
      const auto& alts = g.rules[r].alternatives;
      for (size_t a = 0; a < alts.size() && !productive[r]; ++a) {
        bool ok = true;
        for (size_t i = 0; i < alts[a].size() && ok; ++i) {
          const Element& e = alts[a][i];
          ok = e.kind == Element::Kind::kRule ? productive[static_cast<size_t>(e.rule)] != 0 : element_ok[r][a][i] != 0;
        }
        if (ok) productive[r] = changed = true;
      }
    }
  }
  return productive;
}

}  // namespace

ByteGrammar::ByteGrammar(const Grammar& g) {
  g.validate();
  const size_t n_rules = g.rules.size();
  // Terminal elements that can match something (a class may be empty, e.g. [^\x00-\U0010FFFF]).
  std::vector<std::vector<std::vector<char>>> element_ok(n_rules);
  for (size_t r = 0; r < n_rules; ++r) {
    for (const Sequence& seq : g.rules[r].alternatives) {
      std::vector<char> ok(seq.size(), 1);
      for (size_t i = 0; i < seq.size(); ++i) {
        if (seq[i].kind == Element::Kind::kCharClass) ok[i] = !normalize_class(seq[i].ranges, seq[i].negated).empty();
      }
      element_ok[r].push_back(std::move(ok));
    }
  }
  const std::vector<char> productive = productive_rules(g, element_ok);
  const auto alt_ok = [&](size_t r, size_t a) {
    const Sequence& seq = g.rules[r].alternatives[a];
    for (size_t i = 0; i < seq.size(); ++i) {
      const Element& e = seq[i];
      if (e.kind == Element::Kind::kRule ? !productive[static_cast<size_t>(e.rule)] : !element_ok[r][a][i]) return false;
    }
    return true;
  };
  if (!productive[static_cast<size_t>(g.root)]) {
    throw GrammarError(fmt::format("grammar matches no text (rule '{}' has no finite derivation)", g.rules[static_cast<size_t>(g.root)].name));
  }

  // Nodes: each reachable rule gets a start and an end node, then one node per position inside alternatives.
  std::vector<std::vector<ByteEdge>> out;
  std::vector<std::vector<Call>> calls;
  std::vector<char> accept;
  const auto new_node = [&](int32_t rule) {
    out.emplace_back();
    calls.emplace_back();
    accept.push_back(0);
    node_rule_.push_back(rule);
    if (out.size() > kMaxElements * 4) throw GrammarError("grammar too large to compile");
    return static_cast<int32_t>(out.size() - 1);
  };
  std::vector<int32_t> start(n_rules, -1), end(n_rules, -1);
  std::vector<int32_t> order{g.root};
  for (const Rule& r : g.rules) rule_names_.push_back(r.name);
  start[static_cast<size_t>(g.root)] = new_node(g.root);
  end[static_cast<size_t>(g.root)] = new_node(g.root);
  std::unordered_map<uint64_t, int32_t> literal_child;  // (node, byte) -> shared node of a literal prefix
  for (size_t k = 0; k < order.size(); ++k) {
    const auto r = static_cast<size_t>(order[k]);
    const int32_t rule = order[k];
    accept[static_cast<size_t>(end[r])] = 1;
    for (size_t a = 0; a < g.rules[r].alternatives.size(); ++a) {
      if (!alt_ok(r, a)) continue;
      const Sequence& seq = g.rules[r].alternatives[a];
      int32_t cur = start[r];
      if (seq.empty()) accept[static_cast<size_t>(cur)] = 1;
      for (size_t i = 0; i < seq.size(); ++i) {
        const Element& e = seq[i];
        const bool last = i + 1 == seq.size();
        if (e.kind == Element::Kind::kLiteral) {
          for (size_t j = 0; j < e.bytes.size(); ++j) {
            const auto b = static_cast<uint8_t>(e.bytes[j]);
            if (last && j + 1 == e.bytes.size()) {
              out[static_cast<size_t>(cur)].push_back({b, b, end[r]});
              cur = end[r];
              continue;
            }
            const uint64_t key = (static_cast<uint64_t>(cur) << 8) | b;
            auto [it, fresh] = literal_child.try_emplace(key, -1);
            if (fresh) {
              it->second = new_node(rule);
              out[static_cast<size_t>(cur)].push_back({b, b, it->second});
            }
            cur = it->second;
          }
        } else if (e.kind == Element::Kind::kCharClass) {
          const int32_t target = last ? end[r] : new_node(rule);
          std::map<std::tuple<int32_t, uint8_t, uint8_t>, int32_t> shared;  // prefixes of the byte sequences
          for (const ByteRangeSeq& s : utf8_sequences(normalize_class(e.ranges, e.negated))) {
            int32_t from = cur;
            for (size_t j = 0; j + 1 < s.size(); ++j) {
              auto [it, fresh] = shared.try_emplace({from, s[j].lo, s[j].hi}, -1);
              if (fresh) {
                it->second = new_node(rule);
                out[static_cast<size_t>(from)].push_back({s[j].lo, s[j].hi, it->second});
              }
              from = it->second;
            }
            out[static_cast<size_t>(from)].push_back({s.back().lo, s.back().hi, target});
          }
          cur = target;
        } else {
          const auto callee = static_cast<size_t>(e.rule);
          if (start[callee] < 0) {
            start[callee] = new_node(e.rule);
            end[callee] = new_node(e.rule);
            order.push_back(e.rule);
          }
          const int32_t ret = last ? end[r] : new_node(rule);
          calls[static_cast<size_t>(cur)].push_back({start[callee], last ? -1 : ret});
          cur = ret;
        }
      }
    }
  }
  start_node_ = start[static_cast<size_t>(g.root)];

  // Flatten the edges; ranges to one target are merged.
  edge_begin_.push_back(0);
  for (auto& list : out) {
    std::sort(list.begin(), list.end(), [](const ByteEdge& a, const ByteEdge& b) {
      return a.target != b.target ? a.target < b.target : a.lo < b.lo;
    });
    std::vector<ByteEdge> merged;
    for (const ByteEdge& e : list) {
      if (!merged.empty() && merged.back().target == e.target && e.lo <= merged.back().hi + 1) {
        merged.back().hi = std::max(merged.back().hi, e.hi);
      } else {
        merged.push_back(e);
      }
    }
    std::sort(merged.begin(), merged.end(), [](const ByteEdge& a, const ByteEdge& b) { return a.lo < b.lo; });
    edges_.insert(edges_.end(), merged.begin(), merged.end());
    edge_begin_.push_back(static_cast<uint32_t>(edges_.size()));
  }
  compute_expansions(calls, accept);
}

void ByteGrammar::compute_expansions(const std::vector<std::vector<Call>>& calls, const std::vector<char>& accept) {
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
