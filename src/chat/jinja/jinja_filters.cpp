// jinja2's builtin filters (3.1 semantics) and transformers' tojson: the string, value and number filters
// here, the sequence filters in jinja_sequence_filters.cpp; find_filter looks in both.
// Not provided: filesizeformat, forceescape's Markup tracking, groupby, pprint, random, slice, striptags,
// truncate, urlencode, urlize, wordwrap, xmlattr.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include <utf8proc.h>

#include "chat/jinja/jinja_args.h"
#include "chat/jinja/jinja_bigint.h"
#include "chat/jinja/jinja_builtins.h"
#include "chat/jinja/jinja_eval.h"
#include "chat/jinja/jinja_filter_util.h"
#include "chat/jinja/jinja_ops.h"
#include "chat/jinja/jinja_strings.h"

namespace tide::jinja {

namespace {

// --- string filters ---

Value filter_trim(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("trim", args, {"chars"});
  return Value::string(py_strip(input.str(), bound.get_optional_string(0), true, true));
}

Value filter_upper(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("upper", args, {});
  return Value::string(py_upper(input.str()));
}

Value filter_lower(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("lower", args, {});
  return Value::string(py_lower(input.str()));
}

Value filter_capitalize(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("capitalize", args, {});
  return Value::string(py_capitalize(input.str()));
}

// Words begin after '-', whitespace, '(', '{', '[' or '<'; their first letter goes upper case, the rest lower.
Value filter_title(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("title", args, {});
  std::string out;
  bool word_start = true;
  for (char32_t cp : decode_utf8(input.str())) {
    const bool separator = is_py_space(cp) || cp == U'-' || cp == U'(' || cp == U'{' || cp == U'[' || cp == U'<';
    std::string one;
    append_utf8(one, cp);
    out += separator ? one : word_start ? py_upper(one) : py_lower(one);
    word_start = separator;
  }
  return Value::string(std::move(out));
}

Value filter_replace(Evaluator& evaluator, const Value& input, CallArgs& args) {
  BoundArgs bound("replace", args, {"old", "new", "count"});
  const std::string text = input.str();
  const std::string old_text = bound.get(0).str();
  const std::string new_text = bound.get(1).str();
  const int64_t count = bound.has(2) && !bound.get(2).is_none() ? bound.get_int(2, -1) : -1;
  if (new_text.size() > old_text.size()) {
    const size_t pieces = old_text.empty() ? utf8_length(text) + 1 : text.size() / old_text.size() + 1;
    evaluator.check_size(text.size() + pieces * (new_text.size() - old_text.size()));
  }
  return checked_string(evaluator, py_replace(text, old_text, new_text, count));
}

std::string html_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

Value filter_escape(Evaluator& evaluator, const Value& input, CallArgs& args) {
  BoundArgs bound("escape", args, {});
  return checked_string(evaluator, html_escape(input.str()));
}

Value filter_safe(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("safe", args, {});
  return Value::string(input.str());
}

Value filter_string(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("string", args, {});
  return input.is_string() ? input : Value::string(input.str());
}

Value filter_center(Evaluator& evaluator, const Value& input, CallArgs& args) {
  BoundArgs bound("center", args, {"width"});
  const std::string text = input.str();
  const int64_t width = bound.get_int(0, 80);
  const auto length = static_cast<int64_t>(utf8_length(text));
  if (width <= length) return Value::string(text);
  evaluator.check_size(static_cast<size_t>(width));
  const int64_t margin = width - length;
  const int64_t left = margin / 2 + (margin & width & 1);
  return Value::string(std::string(left, ' ') + text + std::string(margin - left, ' '));
}

Value filter_indent(Evaluator& evaluator, const Value& input, CallArgs& args) {
  BoundArgs bound("indent", args, {"width", "first", "blank"});
  const Value& width = bound.get(0, Value::integer(4));
  if (!width.is_string()) evaluator.check_size(static_cast<size_t>(std::max<int64_t>(bound.get_int(0, 4), 0)));
  const std::string indentation =
      width.is_string() ? width.as_string() : std::string(std::max<int64_t>(bound.get_int(0, 4), 0), ' ');
  const std::vector<std::string> lines = py_splitlines(input.str() + "\n");
  evaluator.check_size(input.str().size() + lines.size() * indentation.size());
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    const bool indented = i > 0 && (bound.get_bool(2, false) || !lines[i].empty());
    out += (indented ? indentation : "") + lines[i];
  }
  if (bound.get_bool(1, false)) out = indentation + out;
  return checked_string(evaluator, std::move(out));
}

Value filter_wordcount(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("wordcount", args, {});
  int64_t count = 0;
  bool in_word = false;
  for (char32_t cp : decode_utf8(input.str())) {
    const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    const bool word = cp == U'_' || (category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO) ||
                      (category >= UTF8PROC_CATEGORY_ND && category <= UTF8PROC_CATEGORY_NO);
    if (word && !in_word) ++count;
    in_word = word;
  }
  return Value::integer(count);
}

Value filter_format(Evaluator& evaluator, const Value& input, CallArgs& args) {
  if (!args.keyword.empty() && !args.positional.empty()) {
    runtime_error("can't handle positional and keyword arguments at the same time");
  }
  if (!args.keyword.empty()) runtime_error("format filter with keyword arguments is not supported");
  return checked_string(evaluator, percent_format(input.str(), args.positional));
}

// --- values and numbers ---

Value filter_default(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("default", args, {"default_value", "boolean"});
  const bool use_default = input.is_undefined() || (bound.get_bool(1, false) && !input.truthy());
  return use_default ? bound.get(0, Value::string("")) : input;
}

// Python float() of a string: optional sign, digits with single underscores, fraction, exponent, inf, nan.
std::optional<double> parse_python_float(const std::string& raw) {
  std::string text;
  for (char c : py_strip(raw, std::nullopt, true, true)) {
    if (c != '_') text.push_back(c);
  }
  if (text.empty() || text.find(' ') != std::string::npos) return std::nullopt;
  std::string lower = py_lower(text);
  const size_t sign = lower[0] == '+' || lower[0] == '-' ? 1 : 0;
  const std::string body = lower.substr(sign);
  if (body == "inf" || body == "infinity" || body == "nan") {
    const double value = body == "nan" ? NAN : INFINITY;
    return lower[0] == '-' ? -value : value;
  }
  if (body.empty() || body.find_first_not_of("0123456789.e+-") != std::string::npos || body[0] == 'e')
    return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return value;
}

std::optional<int64_t> parse_python_int(const std::string& raw, int base) {
  std::string text;
  for (char c : py_strip(raw, std::nullopt, true, true)) {
    if (c != '_') text.push_back(c);
  }
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, base);
  if (end != text.c_str() + text.size() || errno == ERANGE || text.find_first_of(" \t") != std::string::npos) {
    return std::nullopt;
  }
  return value;
}

Value filter_int(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("int", args, {"default", "base"});
  const Value fallback = bound.get(0, Value::integer(0));
  if (input.is_int()) return Value::integer(input.as_int());
  if (input.is_big_int()) return input;
  if (input.is_float()) {
    const double number = input.as_number();
    if (!std::isfinite(number)) runtime_error("cannot convert float {} to integer", py_float_repr(number));
    return Value::integer(float_to_int(number));
  }
  if (!input.is_string()) return fallback;
  if (auto value = parse_python_int(input.as_string(), static_cast<int>(bound.get_int(1, 10))))
    return Value::integer(*value);
  if (auto value = parse_python_float(input.as_string()); value && std::isfinite(*value)) {
    return Value::integer(float_to_int(*value));
  }
  return fallback;
}

Value filter_float(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("float", args, {"default"});
  if (input.is_number()) return Value::real(input.as_number());
  if (input.is_string()) {
    if (auto value = parse_python_float(input.as_string())) return Value::real(*value);
  }
  return bound.get(0, Value::real(0.0));
}

Value filter_abs(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("abs", args, {});
  if (input.is_float()) return Value::real(std::fabs(input.as_number()));
  if (input.is_int()) return input.as_int() < 0 ? unary_op(UnaryOp::kNeg, input) : Value::integer(input.as_int());
  if (input.is_big_int()) return abs_big_int(input);
  runtime_error("bad operand type for abs(): '{}'", input.type_name());
}

// Python's round(x, n): correctly rounded, ties to even on the exact binary value (what printf does).
double python_round(double value, int64_t digits) {
  if (!std::isfinite(value)) return value;
  if (digits >= 0) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<int64_t>(digits, 300)), value);
    return std::strtod(buf, nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-digits));
  return std::nearbyint(value / scale) * scale;
}

Value filter_round(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("round", args, {"precision", "method"});
  const int64_t precision = bound.get_int(0, 0);
  const std::string method = bound.get_string(1, "common");
  if (method != "common" && method != "ceil" && method != "floor")
    runtime_error("method must be common, ceil or floor");
  if (!input.is_number()) runtime_error("type {} doesn't define __round__ method", input.type_name());
  if (method == "common") {
    if (input.is_int()) {
      if (precision >= 0) return Value::integer(input.as_int());
      return Value::integer(float_to_int(python_round(static_cast<double>(input.as_int()), precision)));
    }
    if (input.is_big_int() && precision >= 0) return input;
    return Value::real(python_round(input.as_number(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = input.as_number() * scale;
  return Value::real((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

// --- JSON ---

Value filter_tojson(Evaluator& evaluator, const Value& input, CallArgs& args) {
  BoundArgs bound("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  if (bound.get_bool(0, false)) runtime_error("tojson(ensure_ascii=True) is not supported");
  JsonOptions options;
  const Value& indent = bound.get(1, Value::none());
  if (indent.is_string()) {
    options.indent = indent.as_string();
  } else if (indent.is_int()) {
    evaluator.check_size(static_cast<size_t>(std::max<int64_t>(indent.as_int(), 0)));
    options.indent = std::string(static_cast<size_t>(std::max<int64_t>(indent.as_int(), 0)), ' ');
  } else if (!indent.is_none()) {
    runtime_error("tojson: indent must be an integer or a string");
  }
  const Value& separators = bound.get(2, Value::none());
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.items().size() != 2) runtime_error("tojson: separators must be a pair");
    options.separators = {separators.items()[0].str(), separators.items()[1].str()};
  }
  options.sort_keys = bound.get_bool(3, false);
  evaluator.charge(input.weight() * (options.indent ? 4 : 1));
  return checked_string(evaluator, to_json(input, options));
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs", filter_abs},
      {"capitalize", filter_capitalize},
      {"center", filter_center},
      {"d", filter_default},
      {"default", filter_default},
      {"e", filter_escape},
      {"escape", filter_escape},
      {"float", filter_float},
      {"forceescape", filter_escape},
      {"format", filter_format},
      {"indent", filter_indent},
      {"int", filter_int},
      {"lower", filter_lower},
      {"replace", filter_replace},
      {"round", filter_round},
      {"safe", filter_safe},
      {"string", filter_string},
      {"title", filter_title},
      {"tojson", filter_tojson},
      {"trim", filter_trim},
      {"upper", filter_upper},
      {"wordcount", filter_wordcount},
  };
  return table;
}

}  // namespace

Value checked_string(Evaluator& evaluator, std::string text) {
  evaluator.check_size(text.size());
  evaluator.charge(static_cast<int64_t>(text.size()) / 64);
  return Value::string(std::move(text));
}

FilterFn find_filter(std::string_view name) {
  const auto it = filters().find(name);
  return it != filters().end() ? it->second : find_sequence_filter(name);
}

}  // namespace tide::jinja
