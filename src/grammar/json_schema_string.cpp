// Strings: any JSON string (every escape), length bounds, `pattern` (through the regex compiler, written as
// JSON string content), `format`, and the keys of additional object members.
#include <fmt/format.h>

#include <map>

#include "grammar/json_schema_compiler.h"
#include "grammar/regex.h"

namespace tide::grammar::detail {
namespace {

// Formats as ECMAScript patterns (full match). Each is a subset of what the format allows: the shapes a
// model writes, with field ranges checked where a pattern can (months, hours, octets); day-of-month is not
// checked against the month.
const std::map<std::string, std::string>& format_patterns() {
  static const std::string date = R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))";
  static const std::string time = R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
  static const std::string label = R"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";
  static const std::string octet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
  static const std::string atom = R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)";
  static const std::map<std::string, std::string> patterns = {
      {"date", date},
      {"time", time},
      {"date-time", date + "T" + time},
      {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      {"email", atom + "(\\." + atom + ")*@" + label + "(\\." + label + ")+"},
      {"hostname", label + "(\\." + label + ")*"},
      {"ipv4", octet + "(\\." + octet + "){3}"},
      {"ipv6", R"([0-9a-fA-F]{1,4}(:[0-9a-fA-F]{1,4}){7})"},
      {"uri", R"([A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=-]+)"},
  };
  return patterns;
}

// The least and most code points a regex matches (-1: no most).
std::pair<int64_t, int64_t> length_range(const RegexNode& node) {
  switch (node.kind) {
    case RegexNode::Kind::kChars:
      return {1, 1};
    case RegexNode::Kind::kConcat: {
      int64_t lo = 0, hi = 0;
      for (const RegexNode& c : node.children) {
        const auto [a, b] = length_range(c);
        lo += a;
        hi = (hi == -1 || b == -1) ? -1 : hi + b;
      }
      return {lo, hi};
    }
    case RegexNode::Kind::kAlt: {
      int64_t lo = INT64_MAX, hi = 0;
      for (const RegexNode& c : node.children) {
        const auto [a, b] = length_range(c);
        lo = std::min(lo, a);
        hi = (hi == -1 || b == -1) ? -1 : std::max(hi, b);
      }
      return {lo, hi};
    }
    case RegexNode::Kind::kRepeat: {
      const auto [a, b] = length_range(node.children[0]);
      const int64_t hi = (node.max == -1 || b == -1) ? (b == 0 || node.max == 0 ? 0 : -1) : b * node.max;
      return {a * node.min, hi};
    }
  }
  return {0, -1};
}

// A pattern whose language is one character class repeated: the length bounds can be applied to the
// repeat itself ("^[a-z]+$" with maxLength 8 -> [a-z]{1,8}).
bool apply_lengths(RegexNode& node, int64_t min, int64_t max) {
  if (node.kind != RegexNode::Kind::kRepeat || node.children[0].kind != RegexNode::Kind::kChars) return false;
  node.min = std::max(node.min, min);
  if (max != -1) node.max = node.max == -1 ? max : std::min(node.max, max);
  return node.max == -1 || node.min <= node.max;
}

RegexNode any_text() {  // .* over every character (search semantics: newlines too)
  RegexNode chars;
  chars.kind = RegexNode::Kind::kChars;
  chars.ranges = complement_ranges({});
  RegexNode star;
  star.kind = RegexNode::Kind::kRepeat;
  star.min = 0;
  star.max = -1;
  star.children.push_back(std::move(chars));
  return star;
}

}  // namespace

Element SchemaCompiler::string_value(const Json& schema, const std::string& ptr) {
  const int64_t min = count_keyword(schema, "minLength", 0, ptr);
  const int64_t max = count_keyword(schema, "maxLength", -1, ptr);
  if (max != -1 && min > max) refuse("minLength is above maxLength", ptr);
  Sequence seq{Grammar::literal("\"")};
  if (!schema.contains("pattern") && !schema.contains("format")) {
    if (max != 0) append_element(seq, repeat(json_char(), min, max));
    append_literal(seq, "\"");
    return element_of(std::move(seq));
  }
  if (schema.contains("pattern") && schema.contains("format")) refuse("'pattern' beside 'format' is not supported", ptr);
  const bool is_pattern = schema.contains("pattern");
  const char* key = is_pattern ? "pattern" : "format";
  if (!schema[key].is_string()) refuse(fmt::format("{} must be a string", key), ptr);
  const std::string text = schema[key].get<std::string>();
  RegexNode node;
  try {
    if (is_pattern) {
      // JSON Schema patterns search: a side without its anchor may have any text.
      const ParsedRegex parsed = parse_regex(text);
      node.kind = RegexNode::Kind::kAlt;
      for (const ParsedRegex::Branch& branch : parsed.branches) {
        RegexNode seq_node;
        seq_node.kind = RegexNode::Kind::kConcat;
        if (!branch.anchored_start) seq_node.children.push_back(any_text());
        seq_node.children.push_back(branch.node);
        if (!branch.anchored_end) seq_node.children.push_back(any_text());
        node.children.push_back(seq_node.children.size() == 1 ? branch.node : std::move(seq_node));
      }
      if (node.children.size() == 1) {
        RegexNode only = std::move(node.children[0]);  // out of the node first: assigning a part of it frees it
        node = std::move(only);
      }
    } else {
      const auto found = format_patterns().find(text);
      if (found == format_patterns().end()) refuse(fmt::format("unsupported string format '{}'", text), ptr);
      node = parse_regex(found->second).branches[0].node;
    }
  } catch (const GrammarError& e) {
    if (!is_pattern) throw;
    refuse(fmt::format("pattern '{}' is not supported ({})", text, e.what()), ptr + "/pattern");
  }
  if (min > 0 || max != -1) {
    const auto [lo, hi] = length_range(node);
    const bool implied = lo >= min && (max == -1 || (hi != -1 && hi <= max));
    if (!implied && !apply_lengths(node, min, max)) {
      refuse(fmt::format("minLength / maxLength beside '{}' are supported only where the {} implies them", key, key),
             ptr);
    }
  }
  try {
    append_element(seq, emit_regex(grammar, node, RegexEncoding::kJsonString, key));
  } catch (const GrammarError& e) {
    refuse(fmt::format("{} '{}' is not supported ({})", key, text, e.what()), ptr);
  }
  append_literal(seq, "\"");
  return element_of(std::move(seq));
}

Element SchemaCompiler::json_char() {
  if (json_char_) return *json_char_;
  // Any character but '"', '\' and the controls; or an escape: \" \\ \/ \b \f \n \r \t, or \u and four hex
  // digits that are not a surrogate (a pair of \u escapes would count as two characters for minLength).
  const Element hex = Grammar::char_class({{'0', '9'}, {'A', 'F'}, {'a', 'f'}});
  std::vector<Sequence> u;
  u.push_back({Grammar::char_class({{'0', '9'}, {'A', 'C'}, {'a', 'c'}}), hex, hex, hex});
  u.push_back({Grammar::char_class({{'D', 'D'}, {'d', 'd'}}), Grammar::char_class({{'0', '7'}}), hex, hex});
  u.push_back({Grammar::char_class({{'E', 'F'}, {'e', 'f'}}), hex, hex, hex});
  const Element hex4 = rule("hex4", std::move(u));
  json_char_ = rule("char", {{Grammar::char_class({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, /*negated=*/true)},
                             {Grammar::literal("\\"), Grammar::char_class({{'"', '"'},
                                                                           {'/', '/'},
                                                                           {'\\', '\\'},
                                                                           {'b', 'b'},
                                                                           {'f', 'f'},
                                                                           {'n', 'n'},
                                                                           {'r', 'r'},
                                                                           {'t', 't'}})},
                             {Grammar::literal("\\u"), hex4}});
  return *json_char_;
}

Element SchemaCompiler::key_not_in(const std::vector<std::string>& names) {
  // Keys of additional members are written with one spelling per character (no \u, no \/): any character
  // but '"', '\' and the controls as itself, and the escapes \" \\ \b \f \n \r \t. With one spelling per
  // character, "not one of the listed names" is a trie's complement.
  static const std::vector<uint32_t> kEscaped = {'"', '\\', '\b', '\f', '\n', '\r', '\t'};
  std::vector<CharRange> plain_excluded = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  std::vector<Sequence> key_char_alternatives = {{Grammar::char_class(plain_excluded, true)}};
  for (uint32_t cp : kEscaped) key_char_alternatives.push_back({Grammar::literal(json_escape_code_point(cp))});
  const Element key_chars = grammar.star(rule("key_char", std::move(key_char_alternatives)));

  struct Node {
    bool terminal = false;
    std::map<uint32_t, int> children;
  };
  std::vector<Node> trie(1);
  for (const std::string& name : names) {
    std::vector<uint32_t> cps;
    try {
      cps = decode_utf8(name);
    } catch (const GrammarError&) {
      refuse("a property name is not valid UTF-8", "");
    }
    int node = 0;
    for (uint32_t cp : cps) {
      auto it = trie[node].children.find(cp);
      if (it == trie[node].children.end()) {
        trie.push_back({});
        it = trie[node].children.emplace(cp, static_cast<int>(trie.size()) - 1).first;
      }
      node = it->second;
    }
    trie[node].terminal = true;
  }
  // One rule per trie node, children before parents: the keys that continue from this node and are no name.
  std::vector<int32_t> rules(trie.size());
  for (size_t n = 0; n < trie.size(); ++n) rules[n] = grammar.add_rule("key");
  for (size_t n = 0; n < trie.size(); ++n) {
    const Node& node = trie[n];
    if (!node.terminal) grammar.add_alternative(rules[n], {});
    std::vector<CharRange> excluded = plain_excluded;
    std::set<uint32_t> escaped_children;
    for (const auto& [cp, child] : node.children) {
      grammar.add_alternative(rules[n], {Grammar::literal(json_escape_code_point(cp)), Grammar::ref(rules[child])});
      if (cp < 0x20 || cp == '"' || cp == '\\') {
        escaped_children.insert(cp);
      } else {
        excluded.push_back({cp, cp});
      }
    }
    // A character no name continues with: any key from here on is no name.
    grammar.add_alternative(rules[n], {Grammar::char_class(normalize_ranges(excluded), true), key_chars});
    for (uint32_t cp : kEscaped) {
      if (!escaped_children.count(cp)) {
        grammar.add_alternative(rules[n], {Grammar::literal(json_escape_code_point(cp)), key_chars});
      }
    }
  }
  return element_of({Grammar::literal("\""), Grammar::ref(rules[0]), Grammar::literal("\"")});
}

}  // namespace tide::grammar::detail
