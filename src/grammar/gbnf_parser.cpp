// parse_gbnf: a recursive-descent reader of llama.cpp's GBNF into the grammar IR. Newlines end a rule except
// inside parentheses or before a line that continues the rule with `|`.
#include <fmt/format.h>

#include <cctype>
#include <optional>
#include <unordered_map>

#include "core/utf8_encode.h"
#include "grammar/grammar.h"
#include "tokenizer/utf8.h"

namespace tide::grammar {

namespace {

constexpr int kMaxNesting = 256;  // parentheses; deeper input is refused before the C++ stack suffers

class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : text_(text) {}

  Grammar parse() {
    if (const size_t bad = utf8::find_invalid(text_); bad != utf8::kValid) error_at(bad, "invalid UTF-8");
    skip_space(true);
    while (pos_ < text_.size()) {
      parse_rule();
      skip_space(true);
    }
    for (const auto& [name, use] : first_use_) {
      if (!defined_.contains(name)) error_at(use, fmt::format("rule '{}' is used but never defined", name));
    }
    const auto root = ids_.find("root");
    if (root == ids_.end()) throw GrammarError("GBNF: no rule named 'root'");
    g_.root = root->second;
    g_.validate();
    return std::move(g_);
  }

 private:
  [[noreturn]] void error_at(size_t pos, const std::string& message) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw GrammarError(fmt::format("GBNF line {}, column {}: {}", line, column, message));
  }
  [[noreturn]] void error(const std::string& message) const { error_at(pos_, message); }

  bool eof() const { return pos_ >= text_.size(); }
  char peek() const { return eof() ? '\0' : text_[pos_]; }
  static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  // Spaces, tabs and comments; newlines too when `newlines`.
  void skip_space(bool newlines) {
    while (!eof()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!eof() && peek() != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // At a top-level newline: whether the next non-blank line starts with `|` (the rule goes on).
  bool continues_on_next_line() {
    size_t p = pos_;
    while (p < text_.size()) {
      const char c = text_[p];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++p;
      } else if (c == '#') {
        while (p < text_.size() && text_[p] != '\n') ++p;
      } else {
        break;
      }
    }
    if (p < text_.size() && text_[p] == '|') {
      pos_ = p;
      return true;
    }
    return false;
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!eof() && is_name_char(peek())) ++pos_;
    if (pos_ == start) error("expected a rule name");
    return std::string(text_.substr(start, pos_ - start));
  }

  int32_t rule_id(const std::string& name, size_t use) {
    if (const auto it = ids_.find(name); it != ids_.end()) return it->second;
    const int32_t id = g_.add_rule(name);
    ids_.emplace(name, id);
    first_use_.emplace(name, use);
    return id;
  }

  void parse_rule() {
    const size_t start = pos_;
    const std::string name = parse_name();
    skip_space(false);
    if (text_.substr(pos_, 3) != "::=") error(fmt::format("expected '::=' after rule name '{}'", name));
    pos_ += 3;
    if (defined_.contains(name)) error_at(start, fmt::format("rule '{}' is defined twice", name));
    const int32_t id = rule_id(name, start);
    defined_.emplace(name, start);
    skip_space(true);
    for (Sequence& seq : parse_alternatives(0)) g_.add_alternative(id, std::move(seq));
    skip_space(false);
    if (!eof() && peek() != '\n' && peek() != '\r') error(fmt::format("unexpected '{}'", peek()));
  }

  std::vector<Sequence> parse_alternatives(int depth) {
    std::vector<Sequence> alts;
    alts.push_back(parse_sequence(depth));
    while (true) {
      if (depth == 0 && (peek() == '\n' || peek() == '\r') && !continues_on_next_line()) break;
      if (peek() != '|') break;
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(depth));
    }
    return alts;
  }

  Sequence parse_sequence(int depth) {
    Sequence seq;
    while (true) {
      skip_space(depth > 0);
      const char c = peek();
      if (eof() || c == '|' || c == ')' || c == '\n' || c == '\r') break;
      std::optional<Element> atom = parse_atom(depth);
      skip_space(depth > 0);
      while (true) {  // postfix operators, innermost first
        const size_t op = pos_;
        int64_t min = 0, max = 0;
        if (peek() == '*') {
          ++pos_, min = 0, max = -1;
        } else if (peek() == '+') {
          ++pos_, min = 1, max = -1;
        } else if (peek() == '?') {
          ++pos_, min = 0, max = 1;
        } else if (peek() == '{') {
          parse_braces(min, max);
        } else {
          break;
        }
        try {
          if (atom) atom = g_.repeat(*atom, min, max);
        } catch (const GrammarError& e) {
          error_at(op, e.what());
        }
        skip_space(depth > 0);
      }
      if (atom) seq.push_back(std::move(*atom));
    }
    return seq;
  }

  // {m}, {m,}, {m,n}, {,n}
  void parse_braces(int64_t& min, int64_t& max) {
    ++pos_;
    skip_space(true);
    const bool has_min = !eof() && std::isdigit(static_cast<unsigned char>(peek()));
    min = has_min ? parse_count() : 0;
    skip_space(true);
    if (peek() == ',') {
      ++pos_;
      skip_space(true);
      max = (!eof() && std::isdigit(static_cast<unsigned char>(peek()))) ? parse_count() : -1;
      if (!has_min && max < 0) error("expected a repetition count");
    } else {
      if (!has_min) error("expected a repetition count");
      max = min;
    }
    skip_space(true);
    if (peek() != '}') error("expected '}'");
    ++pos_;
    if (max >= 0 && max < min) error(fmt::format("repetition {{{},{}}}: maximum below minimum", min, max));
  }

  int64_t parse_count() {
    int64_t n = 0;
    while (!eof() && std::isdigit(static_cast<unsigned char>(peek()))) {
      n = n * 10 + (peek() - '0');
      if (n > kMaxRepeat) error(fmt::format("repetition count exceeds the limit of {}", kMaxRepeat));
      ++pos_;
    }
    return n;
  }

  // One element; nullopt for the empty literal "".
  std::optional<Element> parse_atom(int depth) {
    const size_t start = pos_;
    const char c = peek();
    if (c == '"') {
      ++pos_;
      std::string bytes;
      while (peek() != '"') {
        if (eof() || peek() == '\n') error_at(start, "unterminated string literal");
        const size_t at = pos_;
        const uint32_t cp = parse_char();
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) error_at(at, fmt::format("U+{:X} is not a character", cp));
        append_utf8_code_point(static_cast<char32_t>(cp), bytes);
      }
      ++pos_;
      if (bytes.empty()) return std::nullopt;
      return Grammar::literal(std::move(bytes));
    }
    if (c == '[') {
      ++pos_;
      bool negated = false;
      if (peek() == '^') {
        negated = true;
        ++pos_;
      }
      std::vector<CharRange> ranges;
      while (peek() != ']') {
        if (eof()) error_at(start, "unterminated character class");
        const size_t at = pos_;
        const uint32_t lo = parse_char();
        uint32_t hi = lo;
        if (peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
          ++pos_;
          if (eof()) error_at(start, "unterminated character class");
          hi = parse_char();
        }
        if (hi < lo || hi > 0x10FFFF) error_at(at, fmt::format("character range U+{:X}-U+{:X} is invalid", lo, hi));
        ranges.push_back({lo, hi});
      }
      ++pos_;
      return Grammar::char_class(std::move(ranges), negated);
    }
    if (c == '.') {
      ++pos_;
      return Grammar::char_class({}, true);
    }
    if (c == '(') {
      if (depth + 1 > kMaxNesting) error(fmt::format("parentheses nested deeper than {}", kMaxNesting));
      ++pos_;
      skip_space(true);
      std::vector<Sequence> alts = parse_alternatives(depth + 1);
      skip_space(true);
      if (peek() != ')') error_at(start, "unclosed '('");
      ++pos_;
      if (alts.size() == 1 && alts[0].size() == 1) return std::move(alts[0][0]);  // (x) is x
      return g_.group(std::move(alts));
    }
    if (is_name_char(c)) {
      const std::string name = parse_name();
      skip_space(depth > 0);
      if (text_.substr(pos_, 3) == "::=") error_at(start, "missing newline before the next rule");
      return Grammar::ref(rule_id(name, start));
    }
    error(fmt::format("unexpected '{}'", c));
  }

  // One character of a literal or class: an escape or a UTF-8 encoded code point.
  uint32_t parse_char() {
    if (peek() != '\\') {
      size_t p = pos_;
      const uint32_t cp = utf8::next_code_point(text_, p);
      pos_ = p;
      return cp;
    }
    const size_t start = pos_;
    ++pos_;
    if (eof()) error_at(start, "unfinished escape");
    const char e = text_[pos_++];
    switch (e) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': case '^': return static_cast<uint8_t>(e);
      case 'x': return parse_hex(2, start);
      case 'u': return parse_hex(4, start);
      case 'U': return parse_hex(8, start);
      default: error_at(start, fmt::format("unknown escape '\\{}'", e));
    }
  }

  uint32_t parse_hex(int digits, size_t start) {
    uint64_t v = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = peek();
      int d = -1;
      if (h >= '0' && h <= '9') d = h - '0';
      if (h >= 'a' && h <= 'f') d = h - 'a' + 10;
      if (h >= 'A' && h <= 'F') d = h - 'A' + 10;
      if (d < 0) error_at(start, fmt::format("escape needs {} hex digits", digits));
      v = v * 16 + static_cast<uint64_t>(d);
      ++pos_;
    }
    if (v > 0x10FFFF) error_at(start, fmt::format("U+{:X} is beyond U+10FFFF", v));
    return static_cast<uint32_t>(v);
  }

  std::string_view text_;
  size_t pos_ = 0;
  Grammar g_;
  std::unordered_map<std::string, int32_t> ids_;        // GBNF name -> rule
  std::unordered_map<std::string, size_t> first_use_;  // GBNF name -> where first seen
  std::unordered_map<std::string, size_t> defined_;    // GBNF name -> its definition
};

}  // namespace

Grammar parse_gbnf(std::string_view text) { return GbnfParser(text).parse(); }

}  // namespace tide::grammar
