// The regex parser: ECMAScript syntax over UTF-8 code points into RegexNode trees (see regex.h for what is
// refused and why).
#include "grammar/regex.h"

#include <fmt/format.h>

#include <algorithm>

namespace tide::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

}  // namespace

// Decodes UTF-8; a malformed sequence is refused rather than guessed at.
std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto b0 = static_cast<uint8_t>(text[i]);
    int length = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    if (length == 0 || i + length > text.size()) throw GrammarError("the text is not valid UTF-8");
    uint32_t cp = length == 1 ? b0 : length == 2 ? (b0 & 0x1F) : length == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; k < length; ++k) {
      const auto b = static_cast<uint8_t>(text[i + k]);
      if ((b & 0xC0) != 0x80) throw GrammarError("the text is not valid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    const uint32_t min_for_length[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_for_length[length] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
      throw GrammarError("the text is not valid UTF-8");
    }
    out.push_back(cp);
    i += length;
  }
  return out;
}

namespace {

RegexNode chars(std::vector<CharRange> ranges) {
  RegexNode node;
  node.kind = RegexNode::Kind::kChars;
  node.ranges = normalize_ranges(std::move(ranges));
  return node;
}

// The class escapes' sets, as ECMAScript defines them.
std::vector<CharRange> digit_ranges() { return {{'0', '9'}}; }
std::vector<CharRange> word_ranges() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
std::vector<CharRange> space_ranges() {
  return {{'\t', '\r'}, {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
          {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
}

class Parser {
 public:
  explicit Parser(std::vector<uint32_t> text) : text_(std::move(text)) {}

  ParsedRegex parse() {
    ParsedRegex result;
    while (true) {
      ParsedRegex::Branch branch;
      branch.node = parse_concat(/*top_level=*/true, &branch.anchored_start, &branch.anchored_end);
      result.branches.push_back(std::move(branch));
      if (at_end()) break;
      if (peek() == ')') fail("unmatched ')'");
      ++pos_;  // '|'
    }
    return result;
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  uint32_t peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : 0; }
  bool has(size_t ahead) const { return pos_ + ahead < text_.size(); }
  [[noreturn]] void fail(const std::string& what) const {
    throw GrammarError(fmt::format("regex: {} at offset {}", what, pos_));
  }

  RegexNode parse_alternation() {
    RegexNode alt;
    alt.kind = RegexNode::Kind::kAlt;
    while (true) {
      alt.children.push_back(parse_concat(false, nullptr, nullptr));
      if (at_end() || peek() != '|') break;
      ++pos_;
    }
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }

  // A sequence up to '|', ')' or the end. At the top level `^` may open it and `$` close it.
  RegexNode parse_concat(bool top_level, bool* anchored_start, bool* anchored_end) {
    RegexNode seq;
    seq.kind = RegexNode::Kind::kConcat;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '^') {
        if (!top_level || !seq.children.empty() || *anchored_start) {
          fail("the anchor '^' is supported only at the start of the pattern");
        }
        *anchored_start = true;
        ++pos_;
        continue;
      }
      if (peek() == '$') {
        ++pos_;
        if (!top_level || !(at_end() || peek() == '|')) fail("the anchor '$' is supported only at the end of the pattern");
        *anchored_end = true;
        break;
      }
      seq.children.push_back(parse_quantified());
    }
    if (seq.children.size() == 1) return std::move(seq.children[0]);
    return seq;
  }

  RegexNode parse_quantified() {
    RegexNode atom = parse_atom();
    while (!at_end()) {
      int64_t min = 0, max = 0;
      const uint32_t c = peek();
      if (c == '*') {
        min = 0, max = -1, ++pos_;
      } else if (c == '+') {
        min = 1, max = -1, ++pos_;
      } else if (c == '?') {
        min = 0, max = 1, ++pos_;
      } else if (c == '{' && parse_braces(&min, &max)) {
      } else {
        break;
      }
      if (!at_end() && peek() == '?') ++pos_;  // lazy: the same language
      if (!at_end() && peek() == '+') fail("possessive quantifiers are not supported");
      if (!at_end() && (peek() == '*' || peek() == '?' || (peek() == '{' && looks_like_braces()))) {
        fail("nothing to repeat");
      }
      RegexNode repeat;
      repeat.kind = RegexNode::Kind::kRepeat;
      repeat.min = min;
      repeat.max = max;
      repeat.children.push_back(std::move(atom));
      atom = std::move(repeat);
    }
    return atom;
  }

  bool looks_like_braces() {
    const size_t saved = pos_;
    int64_t a, b;
    const bool ok = parse_braces(&a, &b);
    pos_ = saved;
    return ok;
  }

  // {m}, {m,}, {m,n}; anything else leaves the position and is read as a literal '{' (Annex B).
  bool parse_braces(int64_t* min, int64_t* max) {
    const size_t saved = pos_;
    ++pos_;
    auto number = [&](int64_t* out) {
      if (at_end() || peek() < '0' || peek() > '9') return false;
      int64_t value = 0;
      while (!at_end() && peek() >= '0' && peek() <= '9') {
        value = std::min<int64_t>(value * 10 + (peek() - '0'), kMaxRegexRepeat + 1);
        ++pos_;
      }
      *out = value;
      return true;
    };
    if (!number(min)) return pos_ = saved, false;
    *max = *min;
    if (!at_end() && peek() == ',') {
      ++pos_;
      if (!number(max)) *max = -1;
    }
    if (at_end() || peek() != '}') return pos_ = saved, false;
    ++pos_;
    if (*min > kMaxRegexRepeat || *max > kMaxRegexRepeat) {
      fail(fmt::format("a repeat count above {} is not supported", kMaxRegexRepeat));
    }
    if (*max != -1 && *max < *min) fail("numbers out of order in {} quantifier");
    return true;
  }

  RegexNode parse_atom() {
    const uint32_t c = peek();
    switch (c) {
      case '(':
        return parse_group();
      case '[':
        return parse_class();
      case '.':
        ++pos_;
        return chars(complement_ranges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
      case '\\':
        return parse_escape();
      case '*':
      case '+':
      case '?':
        fail("nothing to repeat");
      case '{':
        if (looks_like_braces()) fail("nothing to repeat");
        ++pos_;
        return chars({{c, c}});
      default:
        ++pos_;
        return chars({{c, c}});
    }
  }

  RegexNode parse_group() {
    if (++depth_ > kMaxRegexDepth) fail("groups nested too deeply");
    ++pos_;  // '('
    if (peek() == '?') {
      const uint32_t k = peek(1);
      if (k == ':') {
        pos_ += 2;
      } else if (k == '=' || k == '!') {
        fail("lookahead assertions are not supported");
      } else if (k == '<' && (peek(2) == '=' || peek(2) == '!')) {
        fail("lookbehind assertions are not supported");
      } else if (k == '<') {  // named group: a capture, which changes no language
        pos_ += 2;
        while (!at_end() && peek() != '>') ++pos_;
        if (at_end()) fail("unterminated group name");
        ++pos_;
      } else {
        fail("inline flags and other (? groups are not supported");
      }
    }
    RegexNode inner = parse_alternation();
    if (at_end() || peek() != ')') fail("missing ')'");
    ++pos_;
    --depth_;
    return inner;
  }

  // One escape outside a class.
  RegexNode parse_escape() {
    ++pos_;  // '\'
    if (at_end()) fail("the pattern ends with '\\'");
    const uint32_t c = peek();
    if (c == 'b' || c == 'B') fail("word boundary assertions (\\b, \\B) are not supported");
    if ((c >= '1' && c <= '9') || c == 'k') fail("backreferences are not supported");
    std::vector<CharRange> set;
    if (class_escape(&set)) return chars(std::move(set));
    const uint32_t value = char_escape();
    return chars({{value, value}});
  }

  // \d \D \w \W \s \S: sets of characters. Returns false (consuming nothing) for any other escape.
  bool class_escape(std::vector<CharRange>* set) {
    const uint32_t c = peek();
    switch (c) {
      case 'd': *set = digit_ranges(); break;
      case 'D': *set = complement_ranges(digit_ranges()); break;
      case 'w': *set = word_ranges(); break;
      case 'W': *set = complement_ranges(word_ranges()); break;
      case 's': *set = space_ranges(); break;
      case 'S': *set = complement_ranges(space_ranges()); break;
      case 'p':
      case 'P':
        fail("unicode property escapes (\\p, \\P) are not supported");
      default:
        return false;
    }
    ++pos_;
    return true;
  }

  // A single-character escape (the '\' already consumed); returns its code point.
  uint32_t char_escape() {
    const uint32_t c = peek();
    ++pos_;
    uint32_t value = 0;
    switch (c) {
      case 't': value = '\t'; break;
      case 'n': value = '\n'; break;
      case 'r': value = '\r'; break;
      case 'f': value = '\f'; break;
      case 'v': value = '\v'; break;
      case '0':
        if (!at_end() && peek() >= '0' && peek() <= '9') fail("octal escapes are not supported");
        value = 0;
        break;
      case 'c':
        if (at_end() || !((peek() | 0x20) >= 'a' && (peek() | 0x20) <= 'z')) fail("invalid \\c escape");
        value = peek() % 32;
        ++pos_;
        break;
      case 'x': value = hex_digits(2); break;
      case 'u':
        if (peek() == '{') {
          ++pos_;
          value = 0;
          int count = 0;
          while (!at_end() && peek() != '}') {
            value = value * 16 + hex_value(peek());
            if (++count > 6 || value > kMaxCodePoint) fail("invalid \\u{...} escape");
            ++pos_;
          }
          if (at_end() || count == 0) fail("invalid \\u{...} escape");
          ++pos_;
        } else {
          value = hex_digits(4);
          // A surrogate pair written as two \u escapes is one character.
          if (value >= 0xD800 && value <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
            const size_t saved = pos_;
            pos_ += 2;
            const uint32_t low = hex_digits(4);
            if (low >= 0xDC00 && low <= 0xDFFF) {
              value = 0x10000 + ((value - 0xD800) << 10) + (low - 0xDC00);
            } else {
              pos_ = saved;
            }
          }
          if (value >= 0xD800 && value <= 0xDFFF) fail("a lone surrogate cannot be matched");
        }
        break;
      default:
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
          --pos_;
          fail(fmt::format("unknown escape '\\{}'", static_cast<char>(c)));
        }
        value = c;  // identity escape of punctuation or any non-ASCII character
    }
    return value;
  }

  uint32_t hex_value(uint32_t c) const {
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (c | 0x20) - 'a' + 10;
    fail("invalid hexadecimal escape");
  }
  uint32_t hex_digits(int count) {
    uint32_t value = 0;
    for (int i = 0; i < count; ++i, ++pos_) {
      if (at_end()) fail("invalid hexadecimal escape");
      value = value * 16 + hex_value(peek());
    }
    return value;
  }

  // One class member: a character (its code point in *single) or a class escape (its set in *set).
  bool class_atom(uint32_t* single, std::vector<CharRange>* set) {
    const uint32_t c = peek();
    if (c != '\\') {
      ++pos_;
      *single = c;
      return true;
    }
    ++pos_;
    if (at_end()) fail("the pattern ends with '\\'");
    if (peek() == 'b') {  // backspace inside a class
      ++pos_;
      *single = 0x08;
      return true;
    }
    if (peek() == '-') {
      ++pos_;
      *single = '-';
      return true;
    }
    if ((peek() >= '1' && peek() <= '9') || peek() == 'k') fail("backreferences are not supported");
    if (peek() == 'B') fail("'\\B' is not valid in a class");
    if (class_escape(set)) return false;
    *single = char_escape();
    return true;
  }

  RegexNode parse_class() {
    ++pos_;  // '['
    bool negated = false;
    if (peek() == '^' && has(0)) negated = true, ++pos_;
    std::vector<CharRange> set;
    while (true) {
      if (at_end()) fail("missing ']'");
      if (peek() == ']') break;
      uint32_t lo = 0;
      std::vector<CharRange> escape_set;
      if (!class_atom(&lo, &escape_set)) {
        set.insert(set.end(), escape_set.begin(), escape_set.end());
        continue;
      }
      if (peek() == '-' && has(1) && peek(1) != ']') {
        ++pos_;
        uint32_t hi = 0;
        std::vector<CharRange> hi_set;
        if (!class_atom(&hi, &hi_set)) fail("a class escape cannot end a range");
        if (hi < lo) fail("range out of order in character class");
        set.push_back({lo, hi});
      } else {
        set.push_back({lo, lo});
      }
    }
    ++pos_;  // ']'
    set = normalize_ranges(std::move(set));
    return chars(negated ? complement_ranges(set) : set);
  }

  std::vector<uint32_t> text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

std::vector<CharRange> normalize_ranges(std::vector<CharRange> ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const CharRange& a, const CharRange& b) { return a.lo < b.lo; });
  std::vector<CharRange> out;
  for (const CharRange& r : ranges) {
    if (r.hi < r.lo) continue;
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<CharRange> complement_ranges(const std::vector<CharRange>& ranges) {
  // Every scalar value (surrogates are not characters) outside the ranges.
  std::vector<CharRange> in = normalize_ranges(ranges);
  in.push_back({0xD800, 0xDFFF});
  in = normalize_ranges(std::move(in));
  std::vector<CharRange> out;
  uint32_t next = 0;
  for (const CharRange& r : in) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

ParsedRegex parse_regex(std::string_view pattern) {
  if (pattern.size() > kMaxRegexLength) {
    throw GrammarError(fmt::format("regex: the pattern is longer than {} bytes", kMaxRegexLength));
  }
  return Parser(decode_utf8(pattern)).parse();
}

}  // namespace tide::grammar
