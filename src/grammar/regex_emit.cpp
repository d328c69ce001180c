// RegexNode trees into grammar rules, as UTF-8 or as JSON string content; compile_regex.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "grammar/regex.h"

namespace tide::grammar {
namespace {

// The expanded size of a node: what the grammar's repeat expansion may cost. Saturates far above the bound.
int64_t cost(const RegexNode& node) {
  switch (node.kind) {
    case RegexNode::Kind::kChars:
      return 1;
    case RegexNode::Kind::kConcat:
    case RegexNode::Kind::kAlt: {
      int64_t total = 1;
      for (const RegexNode& child : node.children) total = std::min<int64_t>(total + cost(child), kMaxRegexCost + 1);
      return total;
    }
    case RegexNode::Kind::kRepeat: {
      const int64_t times = std::max<int64_t>(1, node.max == -1 ? node.min + 1 : node.max);
      return std::min<int64_t>(cost(node.children[0]) * times, kMaxRegexCost + 1);
    }
  }
  return 1;
}

bool is_json_special(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

bool nullable(const RegexNode& node) {
  switch (node.kind) {
    case RegexNode::Kind::kChars:
      return false;
    case RegexNode::Kind::kConcat:
      return std::all_of(node.children.begin(), node.children.end(), nullable);
    case RegexNode::Kind::kAlt:
      return std::any_of(node.children.begin(), node.children.end(), nullable);
    case RegexNode::Kind::kRepeat:
      return node.min == 0 || nullable(node.children[0]);
  }
  return false;
}

RegexNode repeat_of(RegexNode body, int64_t min, int64_t max) {
  RegexNode node;
  node.kind = RegexNode::Kind::kRepeat;
  node.min = min;
  node.max = max;
  node.children.push_back(std::move(body));
  return node;
}

// The node's language without the empty string (nullopt: nothing is left). A star over a body that matches
// the empty string would be left-recursive in the grammar; (B)* equals (B without the empty string)*.
std::optional<RegexNode> non_empty(const RegexNode& node) {
  switch (node.kind) {
    case RegexNode::Kind::kChars:
      return node;
    case RegexNode::Kind::kConcat: {
      // (A B) minus empty = (A minus empty) B | B minus empty, the second where A is nullable.
      if (node.children.empty()) return std::nullopt;
      RegexNode rest;
      rest.kind = RegexNode::Kind::kConcat;
      rest.children.assign(node.children.begin() + 1, node.children.end());
      RegexNode alt;
      alt.kind = RegexNode::Kind::kAlt;
      if (auto head = non_empty(node.children[0])) {
        RegexNode seq = rest;
        seq.children.insert(seq.children.begin(), std::move(*head));
        alt.children.push_back(std::move(seq));
      }
      if (nullable(node.children[0])) {
        if (auto tail = non_empty(rest)) alt.children.push_back(std::move(*tail));
      }
      if (alt.children.empty()) return std::nullopt;
      if (alt.children.size() == 1) return std::move(alt.children[0]);
      return alt;
    }
    case RegexNode::Kind::kAlt: {
      RegexNode alt;
      alt.kind = RegexNode::Kind::kAlt;
      for (const RegexNode& child : node.children) {
        if (auto part = non_empty(child)) alt.children.push_back(std::move(*part));
      }
      if (alt.children.empty()) return std::nullopt;
      if (alt.children.size() == 1) return std::move(alt.children[0]);
      return alt;
    }
    case RegexNode::Kind::kRepeat: {
      if (node.max == 0) return std::nullopt;
      if (!nullable(node)) return node;
      auto body = non_empty(node.children[0]);
      if (!body) return std::nullopt;
      return repeat_of(std::move(*body), 1, node.max);  // B{m,n} minus empty = B'{1,n} when B{m,n} is nullable
    }
  }
  return std::nullopt;
}

class Emitter {
 public:
  Emitter(Grammar& grammar, RegexEncoding encoding, std::string name)
      : grammar_(grammar), encoding_(encoding), name_(std::move(name)) {}

  Element element(const RegexNode& node) {
    switch (node.kind) {
      case RegexNode::Kind::kChars:
        return chars_element(node.ranges);
      case RegexNode::Kind::kConcat: {
        Sequence seq;
        append(node, seq);
        if (seq.size() == 1) return seq[0];
        return rule_of({std::move(seq)});
      }
      case RegexNode::Kind::kAlt: {
        std::vector<Sequence> alternatives;
        for (const RegexNode& child : node.children) {
          Sequence seq;
          append(child, seq);
          alternatives.push_back(std::move(seq));
        }
        return rule_of(std::move(alternatives));
      }
      case RegexNode::Kind::kRepeat: {
        if (node.max == 0) return rule_of({Sequence{}});
        if (node.max == -1 && nullable(node.children[0])) {
          // B{m,} with B nullable is (B without the empty string)*, which is not left-recursive.
          auto body = non_empty(node.children[0]);
          if (!body) return rule_of({Sequence{}});
          return grammar_.star(element(*body));
        }
        const Element body = element(node.children[0]);
        if (node.min == 1 && node.max == 1) return body;
        return grammar_.repeat(body, node.min, node.max);
      }
    }
    throw GrammarError("regex: unknown node");
  }

  // Appends the node's elements to `seq`, flattening concatenations and merging adjacent literals.
  void append(const RegexNode& node, Sequence& seq) {
    if (node.kind == RegexNode::Kind::kConcat) {
      for (const RegexNode& child : node.children) append(child, seq);
      return;
    }
    if (node.kind == RegexNode::Kind::kRepeat && node.min == node.max && node.min <= 4 &&
        is_single(node.children[0])) {
      for (int64_t i = 0; i < node.min; ++i) append(node.children[0], seq);  // a{3}: the literal "aaa"
      return;
    }
    if (is_single(node)) {
      const std::string bytes = spell(node.ranges[0].lo);
      if (!seq.empty() && seq.back().kind == Element::Kind::kLiteral) {
        seq.back().bytes += bytes;
      } else {
        seq.push_back(Grammar::literal(bytes));
      }
      return;
    }
    seq.push_back(element(node));
  }

 private:
  static bool is_single(const RegexNode& node) {
    return node.kind == RegexNode::Kind::kChars && node.ranges.size() == 1 && node.ranges[0].lo == node.ranges[0].hi;
  }

  std::string spell(uint32_t cp) const {
    return encoding_ == RegexEncoding::kJsonString ? json_escape_code_point(cp) : encode_utf8(cp);
  }

  Element rule_of(std::vector<Sequence> alternatives) {
    const int32_t rule = grammar_.add_rule(fmt::format("{}_{}", name_, counter_++));
    for (Sequence& seq : alternatives) grammar_.add_alternative(rule, std::move(seq));
    return Grammar::ref(rule);
  }

  // A class of plain characters, in whichever of its two spellings (listed or negated) is shorter.
  static Element class_element(const std::vector<CharRange>& ranges) {
    std::vector<CharRange> complement = complement_ranges(ranges);
    if (complement.size() < ranges.size()) return Grammar::char_class(std::move(complement), /*negated=*/true);
    return Grammar::char_class(ranges);
  }

  Element chars_element(const std::vector<CharRange>& ranges) {
    // A grammar rule needs an alternative, so a class that matches nothing ([], [^\s\S]) cannot be written.
    if (ranges.empty()) throw GrammarError("regex: an empty character class matches nothing");
    if (ranges.size() == 1 && ranges[0].lo == ranges[0].hi) return Grammar::literal(spell(ranges[0].lo));
    if (encoding_ == RegexEncoding::kUtf8) return class_element(ranges);
    auto cached = json_classes_.find(ranges);
    if (cached != json_classes_.end()) return cached->second;
    // JSON content: the characters that need an escape are alternatives of their own.
    std::vector<CharRange> plain;
    std::vector<uint32_t> special;
    for (const CharRange& r : ranges) {
      for (uint32_t cp = r.lo; cp <= r.hi && cp < 0x60; ++cp) {
        if (is_json_special(cp)) special.push_back(cp);
      }
    }
    std::vector<CharRange> excluded;
    for (uint32_t cp = 0; cp < 0x60; ++cp) {
      if (is_json_special(cp)) excluded.push_back({cp, cp});
    }
    const std::vector<CharRange> allowed = complement_ranges(excluded);
    // plain = ranges ∩ allowed
    size_t j = 0;
    for (const CharRange& r : ranges) {
      while (j < allowed.size() && allowed[j].hi < r.lo) ++j;
      for (size_t k = j; k < allowed.size() && allowed[k].lo <= r.hi; ++k) {
        plain.push_back({std::max(r.lo, allowed[k].lo), std::min(r.hi, allowed[k].hi)});
      }
    }
    Element result;
    if (special.empty()) {
      result = class_element(plain);
    } else {
      std::vector<Sequence> alternatives;
      if (!plain.empty()) alternatives.push_back({class_element(plain)});
      for (uint32_t cp : special) alternatives.push_back({Grammar::literal(json_escape_code_point(cp))});
      result = alternatives.size() == 1 ? alternatives[0][0] : rule_of(std::move(alternatives));
    }
    json_classes_.emplace(ranges, result);
    return result;
  }

  struct RangesLess {
    bool operator()(const std::vector<CharRange>& a, const std::vector<CharRange>& b) const {
      return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](const CharRange& x, const CharRange& y) {
        return x.lo != y.lo ? x.lo < y.lo : x.hi < y.hi;
      });
    }
  };

  Grammar& grammar_;
  RegexEncoding encoding_;
  std::string name_;
  int counter_ = 0;
  std::map<std::vector<CharRange>, Element, RangesLess> json_classes_;
};

}  // namespace

std::string encode_utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

std::string json_escape_code_point(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default:
      if (cp < 0x20) return fmt::format("\\u{:04x}", cp);
      return encode_utf8(cp);
  }
}

Element emit_regex(Grammar& grammar, const RegexNode& node, RegexEncoding encoding, const std::string& name) {
  if (cost(node) > kMaxRegexCost) {
    throw GrammarError(fmt::format("regex: the pattern expands to more than {} elements", kMaxRegexCost));
  }
  return Emitter(grammar, encoding, name).element(node);
}

Grammar compile_regex(std::string_view pattern) {
  const ParsedRegex parsed = parse_regex(pattern);
  int64_t total = 0;
  for (const ParsedRegex::Branch& branch : parsed.branches) total += cost(branch.node);
  if (total > kMaxRegexCost) {
    throw GrammarError(fmt::format("regex: the pattern expands to more than {} elements", kMaxRegexCost));
  }
  Grammar grammar;
  const int32_t root = grammar.add_rule("root");
  grammar.root = root;
  Emitter emitter(grammar, RegexEncoding::kUtf8, "regex");
  for (const ParsedRegex::Branch& branch : parsed.branches) {
    Sequence seq;
    emitter.append(branch.node, seq);
    grammar.add_alternative(root, std::move(seq));
  }
  grammar.validate();
  return grammar;
}

}  // namespace tide::grammar
