// Jinja2 lexer (see jinja_lexer.h). Mirrors jinja2's lexer rules: data up to the earliest "{{", "{%" or "{#";
// inside tags whitespace, floats, integers, names, strings and operators in that order, with the end of a tag
// recognized only while brackets are balanced.
#include "chat/jinja/jinja_lexer.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>

#include "chat/jinja/jinja_strings.h"
#include "core/error.h"

namespace tide::jinja {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

bool starts_with(std::string_view text, size_t pos, std::string_view prefix) {
  return text.substr(pos, prefix.size()) == prefix;
}

// Operators, longest first.
constexpr std::array<std::string_view, 26> kOperators = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                                         "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                                         "=",  ".",  ":",  "|",  ",",  ";",  ">", "<"};

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(source) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      if (!lex_data_and_tag()) break;
    }
    push(TokenType::kEnd, "", src_.size());
    return std::move(tokens_);
  }

 private:
  // --- root state: text, then one tag ---

  // Lexes text up to the next tag and the tag itself; false when the rest is text.
  bool lex_data_and_tag() {
    const size_t tag = find_tag_start(pos_);
    if (tag == std::string_view::npos) {
      push(TokenType::kData, std::string(src_.substr(pos_)), pos_);
      pos_ = src_.size();
      return false;
    }
    const char kind = src_[tag + 1];
    size_t after = tag + 2;
    const char sign = after < src_.size() && (src_[after] == '-' || src_[after] == '+') ? src_[after++] : 0;
    const size_t raw_end = kind == '%' ? match_raw_begin(after) : std::string_view::npos;
    push_data(src_.substr(pos_, tag - pos_), sign, kind != '{', pos_);
    if (raw_end != std::string_view::npos) {
      pos_ = raw_end;
      line_starting_ = raw_end > 0 && src_[raw_end - 1] == '\n';
      lex_raw_body(tag);
    } else if (kind == '#') {
      lex_comment(tag, after);
    } else {
      push(kind == '{' ? TokenType::kVariableBegin : TokenType::kBlockBegin, kind == '{' ? "{{" : "{%", tag);
      pos_ = after;
      lex_tag_body(kind == '%');
    }
    return true;
  }

  size_t find_tag_start(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string_view::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string_view::npos;
  }

  // Text before a tag with the tag's whitespace control applied: "-" strips all whitespace before it; else,
  // for block and comment tags (lstrip_blocks), whitespace between the line start and the tag goes.
  void push_data(std::string_view text, char sign, bool lstrip, size_t offset) {
    std::string kept;
    if (sign == '-') {
      kept = py_strip(text, std::nullopt, false, true);
    } else if (sign != '+' && lstrip) {
      const size_t newline = text.rfind('\n');
      const size_t line_pos = newline == std::string_view::npos ? 0 : newline + 1;
      const bool whitespace_only = line_pos < text.size() && skip_py_space(text, line_pos) == text.size();
      kept = (line_pos > 0 || line_starting_) && whitespace_only ? text.substr(0, line_pos) : text;
    } else {
      kept = text;
    }
    if (!kept.empty()) push(TokenType::kData, std::move(kept), offset);
  }

  // The end of a tag: "-" eats the whitespace after it, "+" keeps everything, a plain block or comment end
  // eats one newline (trim_blocks).
  void finish_tag(size_t end, char sign, bool trim_newline) {
    if (sign == '-') {
      end = skip_py_space(src_, end);
    } else if (sign == 0 && trim_newline && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    pos_ = end;
    line_starting_ = end > 0 && src_[end - 1] == '\n';
  }

  // --- raw blocks and comments ---

  // After "{%" and its sign: the end of "\s*raw\s*(-%}\s*|%})", or npos when the tag is not raw.
  size_t match_raw_begin(size_t pos) const {
    pos = skip_py_space(src_, pos);
    if (!starts_with(src_, pos, "raw") || (pos + 3 < src_.size() && is_name_char(src_[pos + 3]))) {
      return std::string_view::npos;
    }
    pos = skip_py_space(src_, pos + 3);
    if (starts_with(src_, pos, "-%}")) return skip_py_space(src_, pos + 3);
    if (starts_with(src_, pos, "%}")) return pos + 2;
    return std::string_view::npos;
  }

  void lex_raw_body(size_t tag) {
    for (size_t i = src_.find("{%", pos_); i != std::string_view::npos; i = src_.find("{%", i + 1)) {
      size_t p = i + 2;
      const char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p++] : 0;
      p = skip_py_space(src_, p);
      if (!starts_with(src_, p, "endraw")) continue;
      p = skip_py_space(src_, p + 6);
      char end_sign = 0;
      if (starts_with(src_, p, "+%}") || starts_with(src_, p, "-%}")) end_sign = src_[p++];
      if (!starts_with(src_, p, "%}")) continue;
      push_data(src_.substr(pos_, i - pos_), sign, true, pos_);
      finish_tag(p + 2, end_sign, true);
      return;
    }
    syntax_error(src_, tag, "missing end of raw directive");
  }

  void lex_comment(size_t tag, size_t body) {
    const size_t close = src_.find("#}", body);
    if (close == std::string_view::npos) syntax_error(src_, tag, "missing end of comment tag");
    const char sign = close > body && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : 0;
    finish_tag(close + 2, sign, true);
  }

  // --- inside {{ }} and {% %} ---

  void lex_tag_body(bool block) {
    std::vector<char> open_brackets;
    const size_t tag = pos_ - 2;
    while (true) {
      if (open_brackets.empty() && lex_tag_end(block)) return;
      const size_t start = pos_;
      pos_ = skip_py_space(src_, pos_);
      if (pos_ != start) continue;
      if (pos_ >= src_.size()) {
        syntax_error(src_, tag,
                     block ? "unexpected end of template, missing '%}'" : "unexpected end of template, missing '}}'");
      }
      if (lex_number() || lex_name() || lex_string()) continue;
      lex_operator(open_brackets);
    }
  }

  bool lex_tag_end(bool block) {
    const size_t start = pos_;
    if (pos_ >= src_.size()) return false;
    char sign = 0;
    if (src_[pos_] == '-' || (block && src_[pos_] == '+')) sign = src_[pos_];
    const size_t close = pos_ + (sign ? 1 : 0);
    if (!starts_with(src_, close, block ? "%}" : "}}")) return false;
    push(block ? TokenType::kBlockEnd : TokenType::kVariableEnd, block ? "%}" : "}}", start);
    finish_tag(close + 2, sign, block);
    return true;
  }

  size_t digits_end(size_t pos) const {  // (\d+_)*\d+
    while (pos < src_.size() &&
           (is_digit(src_[pos]) || (src_[pos] == '_' && pos + 1 < src_.size() && is_digit(src_[pos + 1])))) {
      ++pos;
    }
    return pos;
  }

  bool lex_number() {
    if (!is_digit(src_[pos_])) return false;
    const size_t start = pos_;
    if (src_[pos_] == '0' && pos_ + 1 < src_.size() &&
        std::string_view("xXoObB").find(src_[pos_ + 1]) != std::string_view::npos) {
      return lex_prefixed_integer();
    }
    size_t end = digits_end(pos_);
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
      end = digits_end(end + 1);
      is_float = true;
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t exp = end + 1;
      if (exp < src_.size() && (src_[exp] == '+' || src_[exp] == '-')) ++exp;
      if (exp < src_.size() && is_digit(src_[exp])) {
        end = digits_end(exp);
        is_float = true;
      }
    }
    std::string text;
    for (char c : src_.substr(start, end - start)) {
      if (c != '_') text.push_back(c);
    }
    Token& token = push(is_float ? TokenType::kFloat : TokenType::kInteger, text, start);
    if (is_float) {
      token.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      token.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) syntax_error(src_, start, "integer literal too large (tide's integers are 64-bit)");
    }
    pos_ = end;
    return true;
  }

  bool lex_prefixed_integer() {
    const size_t start = pos_;
    const char prefix = static_cast<char>(src_[pos_ + 1] | 0x20);
    const int base = prefix == 'x' ? 16 : prefix == 'o' ? 8 : 2;
    std::string digits;
    size_t end = pos_ + 2;
    for (; end < src_.size(); ++end) {
      const char c = src_[end];
      if (c == '_') continue;
      const int digit = is_digit(c) ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : 99;
      if (digit >= base) break;
      digits.push_back(c);
    }
    if (digits.empty()) {  // "0" followed by a name such as "0x" with no digits: jinja2 reads 0 then a name
      push(TokenType::kInteger, "0", start).int_value = 0;
      pos_ = start + 1;
      return true;
    }
    errno = 0;
    const long long value = std::strtoll(digits.c_str(), nullptr, base);
    if (errno == ERANGE) syntax_error(src_, start, "integer literal too large (tide's integers are 64-bit)");
    push(TokenType::kInteger, std::string(src_.substr(start, end - start)), start).int_value = value;
    pos_ = end;
    return true;
  }

  bool lex_name() {
    if (!is_name_start(src_[pos_])) return false;
    size_t end = pos_;
    while (end < src_.size() && is_name_char(src_[end])) ++end;
    push(TokenType::kName, std::string(src_.substr(pos_, end - pos_)), pos_);
    pos_ = end;
    return true;
  }

  bool lex_string() {
    const char quote = src_[pos_];
    if (quote != '\'' && quote != '"') return false;
    size_t end = pos_ + 1;
    while (end < src_.size() && src_[end] != quote) end += src_[end] == '\\' ? 2 : 1;
    if (end >= src_.size()) syntax_error(src_, pos_, "unterminated string literal");
    push(TokenType::kString, unescape(src_.substr(pos_ + 1, end - pos_ - 1), pos_), pos_);
    pos_ = end + 1;
    return true;
  }

  // Python's unicode-escape decoding of a string literal's body.
  std::string unescape(std::string_view body, size_t offset) const {
    std::string out;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] != '\\' || i + 1 >= body.size()) {
        out.push_back(body[i]);
        continue;
      }
      const char c = body[++i];
      switch (c) {
        case '\n':
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
          i = append_hex_escape(out, body, i, 2, offset);
          break;
        case 'u':
          i = append_hex_escape(out, body, i, 4, offset);
          break;
        case 'U':
          i = append_hex_escape(out, body, i, 8, offset);
          break;
        default:
          if (c >= '0' && c <= '7') {
            i = append_octal_escape(out, body, i);
          } else {
            out.push_back('\\');
            out.push_back(c);
          }
      }
    }
    return out;
  }

  // body[i] is the escape letter; returns the index of the escape's last character.
  size_t append_hex_escape(std::string& out, std::string_view body, size_t i, size_t num_digits, size_t offset) const {
    const std::string digits(body.substr(i + 1, num_digits));
    char* end = nullptr;
    const unsigned long cp = digits.size() == num_digits ? std::strtoul(digits.c_str(), &end, 16) : 0;
    if (end != digits.c_str() + num_digits || cp > 0x10FFFF)
      syntax_error(src_, offset, "invalid escape in string literal");
    append_utf8(out, static_cast<char32_t>(cp));
    return i + num_digits;
  }

  size_t append_octal_escape(std::string& out, std::string_view body, size_t i) const {
    char32_t cp = 0;
    size_t k = i;
    for (; k < body.size() && k < i + 3 && body[k] >= '0' && body[k] <= '7'; ++k) cp = cp * 8 + (body[k] - '0');
    append_utf8(out, cp);
    return k - 1;
  }

  void lex_operator(std::vector<char>& open_brackets) {
    for (std::string_view op : kOperators) {
      if (!starts_with(src_, pos_, op)) continue;
      const char c = op[0];
      if (op.size() == 1 && (c == '(' || c == '[' || c == '{')) {
        open_brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (op.size() == 1 && (c == ')' || c == ']' || c == '}')) {
        if (open_brackets.empty()) syntax_error(src_, pos_, fmt::format("unexpected '{}'", c));
        if (open_brackets.back() != c) {
          syntax_error(src_, pos_, fmt::format("unexpected '{}', expected '{}'", c, open_brackets.back()));
        }
        open_brackets.pop_back();
      }
      push(TokenType::kOperator, std::string(op), pos_);
      pos_ += op.size();
      return;
    }
    size_t length = 0;
    std::string shown;
    append_utf8(shown, decode_one(src_, pos_, length));
    syntax_error(src_, pos_, fmt::format("unexpected character '{}'", shown));
  }

  // --- tokens and lines ---

  Token& push(TokenType type, std::string text, size_t offset) {
    for (; line_counted_ < offset && line_counted_ < src_.size(); ++line_counted_) {
      if (src_[line_counted_] == '\n') ++line_;
    }
    Token token;
    token.type = type;
    token.text = std::move(text);
    token.offset = offset;
    token.line = line_;
    tokens_.push_back(std::move(token));
    return tokens_.back();
  }

  std::string_view src_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  size_t line_counted_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::string normalize_source(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

std::string describe_position(std::string_view source, size_t offset) {
  offset = std::min(offset, source.size());
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (source[i] == '\n') ++line, line_start = i + 1;
  }
  return fmt::format("line {}, column {}", line, utf8_length(source.substr(line_start, offset - line_start)) + 1);
}

void syntax_error(std::string_view source, size_t offset, const std::string& message) {
  throw Error(fmt::format("chat template syntax error at {}: {}", describe_position(source, offset), message));
}

}  // namespace tide::jinja
