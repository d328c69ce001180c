// The grammar IR: building helpers, validation (references, sizes, left recursion) and GBNF printing.
#include "grammar/grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "grammar/rule_fixpoint.h"
#include "tokenizer/utf8.h"

namespace tide::grammar {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// A GBNF identifier from any string: other characters become '-'.
std::string sanitize_name(std::string name) {
  if (name.empty()) name = "rule";
  for (char& c : name) {
    if (!is_name_char(c)) c = '-';
  }
  return name;
}

void append_escaped_code_point(uint32_t cp, bool in_class, std::string& out) {
  switch (cp) {
    case '\n': out += "\\n"; return;
    case '\t': out += "\\t"; return;
    case '\r': out += "\\r"; return;
    case '\\': out += "\\\\"; return;
    default: break;
  }
  if (!in_class && cp == '"') {
    out += "\\\"";
  } else if (in_class && (cp == ']' || cp == '-' || cp == '^' || cp == '[')) {
    out.push_back('\\');
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x20 || cp == 0x7F) {
    out += fmt::format("\\x{:02X}", cp);
  } else if (cp >= 0xD800 && cp <= 0xDFFF) {
    out += fmt::format("\\u{:04X}", cp);  // not encodable as UTF-8; only printed, never matched
  } else if (cp > 0x10FFFF) {
    out += fmt::format("\\U{:08X}", cp);
  } else {
    utf8::append_code_point(static_cast<char32_t>(cp), out);
  }
}

}  // namespace

int32_t Grammar::add_rule(std::string name) {
  if (rules.size() >= kMaxRules) throw GrammarError(fmt::format("grammar has more than {} rules", kMaxRules));
  name = sanitize_name(std::move(name));
  // Unique names: a taken stem gets the next free suffix, counted per stem so that adding many rules of one
  // stem stays linear.
  if (names_.contains(name)) {
    size_t& next = next_suffix_[name];
    std::string candidate;
    do {
      candidate = fmt::format("{}_{}", name, ++next);
    } while (names_.contains(candidate));
    name = std::move(candidate);
  }
  names_.insert(name);
  rules.push_back(Rule{std::move(name), {}});
  return static_cast<int32_t>(rules.size() - 1);
}

void Grammar::add_alternative(int32_t rule, Sequence seq) {
  if (rule < 0 || static_cast<size_t>(rule) >= rules.size()) {
    throw GrammarError(fmt::format("add_alternative: no rule {}", rule));
  }
  elements_added_ += seq.size();
  if (elements_added_ > kMaxElements) throw GrammarError(fmt::format("grammar has more than {} elements", kMaxElements));
  rules[static_cast<size_t>(rule)].alternatives.push_back(std::move(seq));
}

Element Grammar::repeat(Element e, int64_t min, int64_t max) {
  if (min < 0 || (max >= 0 && max < min) || max < -1) {
    throw GrammarError(fmt::format("repetition {{{},{}}}: bounds out of order", min, max));
  }
  if (min > kMaxRepeat || max > kMaxRepeat) {
    throw GrammarError(fmt::format("repetition bound {} exceeds the limit of {}", std::max(min, max), kMaxRepeat));
  }
  if (min == 1 && max == 1) return e;
  if (elements_added_ + static_cast<size_t>(std::max(min, max) + 2) > kMaxElements) {
    throw GrammarError(fmt::format("grammar has more than {} elements", kMaxElements));
  }
  // The optional tail: `s ::= e s | ""` when unbounded, else a chain t_k ::= e t_{k-1} | "" of k = max - min
  // rules. The reference to the rest sits last in each alternative, so the matcher keeps it off the stack.
  std::optional<Element> tail;
  if (max < 0) {
    const int32_t s = add_rule("star");
    add_alternative(s, {e, ref(s)});
    add_alternative(s, {});
    tail = ref(s);
  } else {
    for (int64_t k = 1; k <= max - min; ++k) {
      const int32_t t = add_rule("opt");
      Sequence seq{e};
      if (tail) seq.push_back(*tail);
      add_alternative(t, std::move(seq));
      add_alternative(t, {});
      tail = ref(t);
    }
  }
  if (min == 0) {
    if (tail) return *tail;
    const int32_t empty = add_rule("empty");
    add_alternative(empty, {});
    return ref(empty);
  }
  const int32_t r = add_rule("rep");
  Sequence seq(static_cast<size_t>(min), e);
  if (tail) seq.push_back(*tail);
  add_alternative(r, std::move(seq));
  return ref(r);
}

Element Grammar::group(std::vector<Sequence> alternatives, std::string name) {
  const int32_t r = add_rule(std::move(name));
  for (Sequence& seq : alternatives) add_alternative(r, std::move(seq));
  return ref(r);
}

Element Grammar::literal(std::string bytes) {
  Element e;
  e.kind = Element::Kind::kLiteral;
  e.bytes = std::move(bytes);
  return e;
}

Element Grammar::char_class(std::vector<CharRange> ranges, bool negated) {
  Element e;
  e.kind = Element::Kind::kCharClass;
  e.ranges = std::move(ranges);
  e.negated = negated;
  return e;
}

Element Grammar::ref(int32_t rule) {
  Element e;
  e.kind = Element::Kind::kRule;
  e.rule = rule;
  return e;
}

size_t Grammar::element_count() const {
  size_t n = 0;
  for (const Rule& r : rules) {
    for (const Sequence& seq : r.alternatives) n += seq.size();
  }
  return n;
}

void Grammar::validate() const {
  if (rules.size() > kMaxRules) throw GrammarError(fmt::format("grammar has more than {} rules", kMaxRules));
  if (element_count() > kMaxElements) throw GrammarError(fmt::format("grammar has more than {} elements", kMaxElements));
  if (root < 0 || static_cast<size_t>(root) >= rules.size()) throw GrammarError("grammar has no root rule");
  const size_t n = rules.size();
  // Rules reachable from the root, with their element checks.
  std::vector<char> reachable(n, 0);
  std::vector<int32_t> work{root};
  reachable[static_cast<size_t>(root)] = 1;
  while (!work.empty()) {
    const Rule& rule = rules[static_cast<size_t>(work.back())];
    work.pop_back();
    if (rule.alternatives.empty()) throw GrammarError(fmt::format("rule '{}' has no alternatives", rule.name));
    for (const Sequence& seq : rule.alternatives) {
      for (const Element& e : seq) {
        switch (e.kind) {
          case Element::Kind::kLiteral:
            if (e.bytes.empty()) throw GrammarError(fmt::format("rule '{}' has an empty literal", rule.name));
            if (utf8::find_invalid(e.bytes) != utf8::kValid) {
              throw GrammarError(fmt::format("rule '{}' has a literal that is not valid UTF-8", rule.name));
            }
            break;
          case Element::Kind::kCharClass:
            for (const CharRange& r : e.ranges) {
              if (r.lo > r.hi || r.hi > 0x10FFFF) {
                throw GrammarError(fmt::format("rule '{}' has a character range {:X}-{:X} out of order or beyond U+10FFFF",
                                               rule.name, r.lo, r.hi));
              }
            }
            break;
          case Element::Kind::kRule:
            if (e.rule < 0 || static_cast<size_t>(e.rule) >= n) {
              throw GrammarError(fmt::format("rule '{}' refers to a rule {} that does not exist", rule.name, e.rule));
            }
            if (!reachable[static_cast<size_t>(e.rule)]) {
              reachable[static_cast<size_t>(e.rule)] = 1;
              work.push_back(e.rule);
            }
            break;
        }
      }
    }
  }
  // Nullable rules (fixpoint), then the "left corner" graph: A -> B when B can be the first rule A enters
  // without consuming input. A cycle in it is left recursion, which a top-down matcher cannot run.
  const std::vector<char> nullable = detail::mark_rules(*this, [](size_t, size_t, size_t) { return false; });
  std::vector<std::vector<int32_t>> corner(n);
  for (size_t i = 0; i < n; ++i) {
    if (!reachable[i]) continue;
    for (const Sequence& seq : rules[i].alternatives) {
      for (const Element& e : seq) {
        if (e.kind != Element::Kind::kRule) break;
        corner[i].push_back(e.rule);
        if (!nullable[static_cast<size_t>(e.rule)]) break;
      }
    }
  }
  // Iterative DFS (hostile grammars may chain many rules) with colors: 1 on the path, 2 done.
  std::vector<char> color(n, 0);
  std::vector<std::pair<size_t, size_t>> path;  // (rule, next edge)
  for (size_t start = 0; start < n; ++start) {
    if (!reachable[start] || color[start]) continue;
    path.push_back({start, 0});
    color[start] = 1;
    while (!path.empty()) {
      auto& [rule, edge] = path.back();
      if (edge == corner[rule].size()) {
        color[rule] = 2;
        path.pop_back();
        continue;
      }
      const auto next = static_cast<size_t>(corner[rule][edge++]);
      if (color[next] == 1) {
        throw GrammarError(fmt::format("rule '{}' is left-recursive (through '{}')", rules[next].name, rules[rule].name));
      }
      if (color[next] == 0) {
        color[next] = 1;
        path.push_back({next, 0});
      }
    }
  }
}

std::string Grammar::to_gbnf() const {
  // Printed names: the root rule is `root`; a different rule that happens to be called root is renamed.
  std::vector<std::string> names(rules.size());
  std::unordered_set<std::string> used{"root"};
  for (size_t i = 0; i < rules.size(); ++i) {
    if (static_cast<int32_t>(i) == root) {
      names[i] = "root";
      continue;
    }
    std::string name = sanitize_name(rules[i].name);
    for (size_t k = 1; used.contains(name); ++k) name = fmt::format("{}-{}", sanitize_name(rules[i].name), k);
    used.insert(name);
    names[i] = std::move(name);
  }
  std::vector<size_t> order;
  if (root >= 0 && static_cast<size_t>(root) < rules.size()) order.push_back(static_cast<size_t>(root));
  for (size_t i = 0; i < rules.size(); ++i) {
    if (static_cast<int32_t>(i) != root) order.push_back(i);
  }
  std::string out;
  for (const size_t i : order) {
    out += names[i];
    out += " ::=";
    const auto& alts = rules[i].alternatives;
    for (size_t a = 0; a < alts.size(); ++a) {
      if (a > 0) out += " |";
      if (alts[a].empty()) out += " \"\"";
      for (const Element& e : alts[a]) {
        out.push_back(' ');
        switch (e.kind) {
          case Element::Kind::kLiteral: {
            out.push_back('"');
            size_t pos = 0;
            if (utf8::find_invalid(e.bytes) != utf8::kValid) {
              for (const char c : e.bytes) out += fmt::format("\\x{:02X}", static_cast<unsigned char>(c));
            } else {
              while (pos < e.bytes.size()) append_escaped_code_point(utf8::next_code_point(e.bytes, pos), false, out);
            }
            out.push_back('"');
            break;
          }
          case Element::Kind::kCharClass:
            out += e.negated ? "[^" : "[";
            for (const CharRange& r : e.ranges) {
              append_escaped_code_point(r.lo, true, out);
              if (r.hi != r.lo) {
                out.push_back('-');
                append_escaped_code_point(r.hi, true, out);
              }
            }
            out.push_back(']');
            break;
          case Element::Kind::kRule:
            out += (e.rule >= 0 && static_cast<size_t>(e.rule) < rules.size()) ? names[static_cast<size_t>(e.rule)]
                                                                                : fmt::format("missing-{}", e.rule);
            break;
        }
      }
    }
    out.push_back('\n');
  }
  return out;
}

}  // namespace tide::grammar
