// parse_json_exact / dump_json_exact: JSON whose integer literals keep every digit (see json_exact.h).
#include "chat/json_exact.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tide {

namespace {

using Json = nlohmann::ordered_json;

// An integer literal as JSON writes one: "-" then digits, no leading zeros.
bool is_integer_literal(std::string_view text) {
  const std::string_view digits = !text.empty() && text[0] == '-' ? text.substr(1) : text;
  if (digits.empty() || (digits[0] == '0' && digits.size() > 1)) return false;
  return std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
}

Json big_integer(std::string_view decimal) {
  return Json::binary(std::vector<std::uint8_t>(decimal.begin(), decimal.end()), kBigIntegerSubtype);
}

// nlohmann's lexer reads an integer literal that overflows 64 bits as a double, and refuses the text when even
// the double overflows (beyond about 1e308), before the SAX handler could see the literal. Such literals (over
// kLongLiteral digits) are found first: each is blanked in a copy of the text to "0" and spaces (same length,
// so error positions stay right) and restored by the handler, which counts the number tokens to know which.
constexpr size_t kLongLiteral = 300;

struct LongLiterals {
  std::string text;                                  // the text with the long literals blanked; empty if none
  std::vector<std::pair<size_t, std::string>> kept;  // (ordinal among the number tokens, literal), in order
};

LongLiterals find_long_literals(std::string_view text) {
  LongLiterals found;
  size_t ordinal = 0;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '"') {  // skip a string: its digits are not numbers
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\') ++i;
      }
      ++i;
      continue;
    }
    if (c != '-' && (c < '0' || c > '9')) {
      ++i;
      continue;
    }
    // One number token: the characters a JSON number is made of.
    size_t end = i;
    while (end < text.size() && (std::string_view("0123456789+-.eE").find(text[end]) != std::string_view::npos)) ++end;
    const std::string_view literal = text.substr(i, end - i);
    if (literal.size() > kLongLiteral && is_integer_literal(literal)) {
      if (found.text.empty()) found.text = std::string(text);
      found.kept.emplace_back(ordinal, std::string(literal));
      found.text[i] = '0';
      std::fill_n(found.text.begin() + static_cast<std::ptrdiff_t>(i) + 1, literal.size() - 1, ' ');
    }
    ++ordinal;
    i = end;
  }
  return found;
}

// Builds the document from nlohmann's SAX events (as its own DOM parser does), keeping big integers and
// refusing deep nesting.
class ExactSax {
 public:
  ExactSax(int max_depth, const std::vector<std::pair<size_t, std::string>>& long_literals)
      : max_depth_(max_depth), long_literals_(long_literals) {}

  bool null() { return add(nullptr); }
  bool boolean(bool value) { return add(value); }
  bool number_integer(Json::number_integer_t value) { return number(value); }
  bool number_unsigned(Json::number_unsigned_t value) { return number(value); }
  bool number_float(Json::number_float_t value, const std::string& literal) {
    if (is_integer_literal(literal)) return number(big_integer(literal));
    return number(value);
  }
  bool string(std::string& value) { return add(std::move(value)); }
  bool binary(Json::binary_t&) { fail("JSON text holds no binary values"); }

  bool start_object(std::size_t) { return open(Json::object()); }
  bool key(std::string& name) {
    key_ = std::move(name);
    return true;
  }
  bool end_object() {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) { return open(Json::array()); }
  bool end_array() {
    stack_.pop_back();
    return true;
  }

  template <typename Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& error) {
    throw error;
  }

  Json take() { return std::move(root_); }

 private:
  // A number token; the next blanked long literal replaces it when it is that one.
  template <typename Value>
  bool number(Value&& value) {
    const size_t ordinal = numbers_++;
    if (next_long_ < long_literals_.size() && long_literals_[next_long_].first == ordinal) {
      return add(big_integer(long_literals_[next_long_++].second));
    }
    return add(std::forward<Value>(value));
  }

  template <typename Value>
  Json* add_value(Value&& value) {
    if (stack_.empty()) {
      root_ = Json(std::forward<Value>(value));
      return &root_;
    }
    Json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(Json(std::forward<Value>(value)));
      return &parent.back();
    }
    Json& slot = parent[key_];  // a repeated key: first position, last value
    slot = Json(std::forward<Value>(value));
    return &slot;
  }

  template <typename Value>
  bool add(Value&& value) {
    add_value(std::forward<Value>(value));
    return true;
  }

  bool open(Json container) {
    if (static_cast<int>(stack_.size()) >= max_depth_) fail("JSON nests deeper than {} levels", max_depth_);
    // The pointers on the stack stay valid: only the innermost container grows while they are in use.
    stack_.push_back(add_value(std::move(container)));
    return true;
  }

  const int max_depth_;
  const std::vector<std::pair<size_t, std::string>>& long_literals_;
  size_t numbers_ = 0;
  size_t next_long_ = 0;
  Json root_;
  std::vector<Json*> stack_;
  std::string key_;
};

template <typename AnyJson>
bool contains_big_integer(const AnyJson& json) {
  if (is_big_integer(json)) return true;
  if (!json.is_structured()) return false;
  return std::any_of(json.begin(), json.end(), [](const AnyJson& item) { return contains_big_integer(item); });
}

// nlohmann's layout: "[\n" + items at indent * (level + 1) + "\n" + indent * level + "]"; compact "[1,2]".
template <typename AnyJson>
void dump_to(std::string& out, const AnyJson& json, int indent, int level, nlohmann::json::error_handler_t handler) {
  if (is_big_integer(json)) {
    out += big_integer_text(json);
    return;
  }
  if (!json.is_structured() || json.empty()) {
    out += json.dump(-1, ' ', false, handler);
    return;
  }
  const bool pretty = indent >= 0;
  const std::string inner = pretty ? "\n" + std::string(static_cast<size_t>(indent) * (level + 1), ' ') : "";
  out.push_back(json.is_object() ? '{' : '[');
  bool first = true;
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (!first) out.push_back(',');
    first = false;
    out += inner;
    if (json.is_object()) {
      out += AnyJson(it.key()).dump(-1, ' ', false, handler);
      out += pretty ? ": " : ":";
    }
    dump_to(out, *it, indent, level + 1, handler);
  }
  if (pretty) out += "\n" + std::string(static_cast<size_t>(indent) * level, ' ');
  out.push_back(json.is_object() ? '}' : ']');
}

template <typename AnyJson>
std::string dump_exact(const AnyJson& json, int indent, bool replace_invalid_utf8) {
  const auto handler =
      replace_invalid_utf8 ? nlohmann::json::error_handler_t::replace : nlohmann::json::error_handler_t::strict;
  if (!contains_big_integer(json)) return json.dump(indent, ' ', false, handler);
  std::string out;
  dump_to(out, json, indent, 0, handler);
  return out;
}

}  // namespace

Json parse_json_exact(std::string_view text, int max_depth) {
  const LongLiterals long_literals = find_long_literals(text);
  const std::string_view input = long_literals.kept.empty() ? text : std::string_view(long_literals.text);
  ExactSax sax(max_depth, long_literals.kept);
  Json::sax_parse(input.begin(), input.end(), &sax);
  return sax.take();
}

Json make_big_integer(std::string_view decimal) {
  if (!is_integer_literal(decimal) || decimal == "-0") fail("not an integer literal: '{}'", decimal);
  return big_integer(decimal);
}

std::string dump_json_exact(const nlohmann::ordered_json& json, int indent, bool replace_invalid_utf8) {
  return dump_exact(json, indent, replace_invalid_utf8);
}

std::string dump_json_exact(const nlohmann::json& json, int indent, bool replace_invalid_utf8) {
  return dump_exact(json, indent, replace_invalid_utf8);
}

}  // namespace tide
