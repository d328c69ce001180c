// jinja2's builtin filters (3.1 semantics) and transformers' tojson. Filters that return generators in jinja2
// (map, select, reject, selectattr, rejectattr, unique, reverse of a list, items, batch) return iterator-kind
// lists here: always true, no length, printed as a generator.
// Not provided: filesizeformat, forceescape's Markup tracking, groupby, pprint, random, slice, striptags,
// truncate, urlencode, urlize, wordwrap, xmlattr.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include <utf8proc.h>

#include "chat/jinja_args.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_eval.h"
#include "chat/jinja_ops.h"
#include "chat/jinja_strings.h"

namespace tide::jinja {

namespace {

// --- helpers shared by several filters ---

Value iterator_of(std::vector<Value> items) { return Value::list(std::move(items), SequenceKind::kIterator); }

Value ignore_case(const Value& value) { return value.is_string() ? Value::string(py_lower(value.as_string())) : value; }

// jinja2's make_attrgetter: "a.b.0" looks up item a, then b, then index 0; `fallback` replaces undefined
// results.
class AttrGetter {
 public:
  AttrGetter(const Value& attribute, bool lowercase, Value fallback = Value())
      : lowercase_(lowercase), fallback_(std::move(fallback)) {
    if (attribute.is_int()) {
      parts_.push_back(attribute);
    } else if (attribute.is_string()) {
      for (const std::string& part : py_split(attribute.as_string(), std::string("."), -1)) {
        const bool digits =
            !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
        parts_.push_back(digits ? Value::integer(std::strtoll(part.c_str(), nullptr, 10)) : Value::string(part));
      }
    } else if (!attribute.is_none() && !attribute.is_undefined()) {
      parts_.push_back(attribute);
    }
  }

  Value operator()(Value item) const {
    for (const Value& part : parts_) {
      item = get_item(item, part);
      if (!fallback_.is_undefined() && !fallback_.is_none() && item.is_undefined()) item = fallback_;
    }
    return lowercase_ ? ignore_case(item) : item;
  }

 private:
  std::vector<Value> parts_;
  bool lowercase_;
  Value fallback_;
};

std::vector<Value> sorted_items(Evaluator& evaluator, std::vector<Value> items, const AttrGetter& key, bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) keyed.emplace_back(key(item), std::move(item));
  const auto n = static_cast<int64_t>(keyed.size());
  evaluator.charge(n * (1 + static_cast<int64_t>(std::log2(n + 1))));
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    if (a.first.is_undefined()) undefined_error(a.first);
    if (b.first.is_undefined()) undefined_error(b.first);
    return reverse ? compare(b.first, a.first) < 0 : compare(a.first, b.first) < 0;
  });
  std::vector<Value> out;
  for (auto& entry : keyed) out.push_back(std::move(entry.second));
  return out;
}

Value checked_string(Evaluator& evaluator, std::string text) {
  evaluator.check_size(text.size());
  evaluator.charge(static_cast<int64_t>(text.size()) / 64);
  return Value::string(std::move(text));
}

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

// --- sequence filters ---

Value filter_length(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("length", args, {});
  switch (input.kind()) {
    case Value::Kind::kUndefined:
      return Value::integer(0);
    case Value::Kind::kString:
      return Value::integer(static_cast<int64_t>(utf8_length(input.as_string())));
    case Value::Kind::kDict:
      return Value::integer(static_cast<int64_t>(input.as_dict().size()));
    case Value::Kind::kList:
      if (input.sequence_kind() != SequenceKind::kIterator)
        return Value::integer(static_cast<int64_t>(input.items().size()));
      break;
    default:
      break;
  }
  runtime_error("object of type '{}' has no len()", input.type_name());
}

Value filter_first(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("first", args, {});
  const std::vector<Value> items = iterate(input);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value filter_last(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("last", args, {});
  if (input.is_list() && input.sequence_kind() == SequenceKind::kIterator) {
    runtime_error("'generator' object is not reversible");
  }
  const std::vector<Value> items = iterate(input);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value filter_list(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("list", args, {});
  return Value::list(iterate(input));
}

Value filter_reverse(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("reverse", args, {});
  if (input.is_string()) {
    std::u32string text = decode_utf8(input.as_string());
    std::reverse(text.begin(), text.end());
    return Value::string(encode_utf8(text));
  }
  std::vector<Value> items = iterate(input);
  std::reverse(items.begin(), items.end());
  const bool iterator = input.is_list() && input.sequence_kind() == SequenceKind::kIterator;
  return iterator ? Value::list(std::move(items)) : iterator_of(std::move(items));
}

Value filter_join(Evaluator& evaluator, const Value& input, CallArgs& args) {
  BoundArgs bound("join", args, {"d", "attribute"});
  const std::string separator = bound.get_string(0, "");
  const AttrGetter getter(bound.get(1), false);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(input)) {
    if (!first) out += separator;
    first = false;
    out += getter(item).str();
    evaluator.check_size(out.size());
  }
  return checked_string(evaluator, std::move(out));
}

Value filter_sort(Evaluator& evaluator, const Value& input, CallArgs& args) {
  BoundArgs bound("sort", args, {"reverse", "case_sensitive", "attribute"});
  const AttrGetter key(bound.get(2), !bound.get_bool(1, false));
  return Value::list(sorted_items(evaluator, iterate(input), key, bound.get_bool(0, false)));
}

Value filter_dictsort(Evaluator& evaluator, const Value& input, CallArgs& args) {
  BoundArgs bound("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!input.is_dict()) runtime_error("dictsort expects a mapping, not {}", input.type_name());
  const std::string by = bound.get_string(1, "key");
  if (by != "key" && by != "value") runtime_error("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> pairs;
  for (const auto& [key, value] : input.as_dict().entries())
    pairs.push_back(Value::list({key, value}, SequenceKind::kTuple));
  const AttrGetter getter(Value::integer(by == "key" ? 0 : 1), !bound.get_bool(0, false));
  return Value::list(sorted_items(evaluator, std::move(pairs), getter, bound.get_bool(2, false)));
}

Value filter_unique(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("unique", args, {"case_sensitive", "attribute"});
  const AttrGetter key(bound.get(1), !bound.get_bool(0, false));
  Dict seen;
  std::vector<Value> out;
  for (const Value& item : iterate(input)) {
    const Value item_key = key(item);
    if (seen.find(item_key) != nullptr) continue;
    seen.set(item_key, Value::none());
    out.push_back(item);
  }
  return iterator_of(std::move(out));
}

Value min_or_max(Evaluator& evaluator, const Value& input, CallArgs& args, bool want_max) {
  BoundArgs bound(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  const std::vector<Value> items = iterate(input);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const AttrGetter key(bound.get(1), !bound.get_bool(0, false));
  evaluator.charge(static_cast<int64_t>(items.size()));
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value item_key = key(items[i]);
    const bool better =
        want_max ? compare_op(CompareOp::kGt, item_key, best_key) : compare_op(CompareOp::kLt, item_key, best_key);
    if (better) best = i, best_key = std::move(item_key);
  }
  return items[best];
}

Value filter_min(Evaluator& evaluator, const Value& input, CallArgs& args) {
  return min_or_max(evaluator, input, args, false);
}
Value filter_max(Evaluator& evaluator, const Value& input, CallArgs& args) {
  return min_or_max(evaluator, input, args, true);
}

Value filter_sum(Evaluator& evaluator, const Value& input, CallArgs& args) {
  BoundArgs bound("sum", args, {"attribute", "start"});
  const AttrGetter getter(bound.get(0), false);
  Value total = bound.get(1, Value::integer(0));
  for (const Value& item : iterate(input)) total = binary_op(evaluator, BinaryOp::kAdd, total, getter(item));
  return total;
}

Value filter_batch(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("batch", args, {"linecount", "fill_with"});
  const int64_t size = bound.get_int(0, 1);
  if (size <= 0) runtime_error("batch size must be positive");
  std::vector<Value> batches;
  std::vector<Value> current;
  for (const Value& item : iterate(input)) {
    if (static_cast<int64_t>(current.size()) == size) batches.push_back(Value::list(std::exchange(current, {})));
    current.push_back(item);
  }
  if (!current.empty()) {
    if (bound.has(1) && !bound.get(1).is_none()) {
      while (static_cast<int64_t>(current.size()) < size) current.push_back(bound.get(1));
    }
    batches.push_back(Value::list(std::move(current)));
  }
  return iterator_of(std::move(batches));
}

Value filter_items(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("items", args, {});
  if (input.is_undefined()) return iterator_of({});
  if (!input.is_dict()) runtime_error("Can only get item pairs from a mapping.");
  std::vector<Value> pairs;
  for (const auto& [key, value] : input.as_dict().entries())
    pairs.push_back(Value::list({key, value}, SequenceKind::kTuple));
  return iterator_of(std::move(pairs));
}

Value filter_map(Evaluator& evaluator, const Value& input, CallArgs& args) {
  if (!input.truthy()) return iterator_of({});
  std::vector<Value> out;
  if (args.positional.empty()) {
    Value attribute;
    Value fallback;
    for (const auto& [key, value] : args.keyword) {
      if (key == "attribute") {
        attribute = value;
      } else if (key == "default") {
        fallback = value;
      } else {
        runtime_error("Unexpected keyword argument '{}'", key);
      }
    }
    if (attribute.is_undefined()) runtime_error("map requires a filter argument");
    const AttrGetter getter(attribute, false, fallback);
    for (const Value& item : iterate(input)) out.push_back(getter(item));
    return iterator_of(std::move(out));
  }
  const std::string name = args.positional[0].str();
  CallArgs rest{std::vector<Value>(args.positional.begin() + 1, args.positional.end()), args.keyword};
  for (const Value& item : iterate(input)) {
    CallArgs copy = rest;
    out.push_back(evaluator.apply_filter(name, item, copy));
  }
  return iterator_of(std::move(out));
}

// select / reject / selectattr / rejectattr: the items whose test (or truthiness) result is `keep`.
Value select_items(Evaluator& evaluator, const Value& input, CallArgs& args, bool keep, bool by_attribute) {
  if (!input.truthy()) return iterator_of({});
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) runtime_error("Missing parameter for attribute name");
    attribute = args.positional[next++];
  }
  const AttrGetter getter(attribute, false);
  const bool has_test = next < args.positional.size();
  const std::string test = has_test ? args.positional[next++].str() : "";
  CallArgs test_args{
      std::vector<Value>(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end()),
      args.keyword};
  std::vector<Value> out;
  for (const Value& item : iterate(input)) {
    const Value subject = getter(item);
    CallArgs copy = test_args;
    const bool passed = has_test ? evaluator.apply_test(test, subject, copy) : subject.truthy();
    if (passed == keep) out.push_back(item);
  }
  return iterator_of(std::move(out));
}

Value filter_select(Evaluator& e, const Value& input, CallArgs& args) {
  return select_items(e, input, args, true, false);
}
Value filter_reject(Evaluator& e, const Value& input, CallArgs& args) {
  return select_items(e, input, args, false, false);
}
Value filter_selectattr(Evaluator& e, const Value& input, CallArgs& args) {
  return select_items(e, input, args, true, true);
}
Value filter_rejectattr(Evaluator& e, const Value& input, CallArgs& args) {
  return select_items(e, input, args, false, true);
}

Value filter_attr(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("attr", args, {"name"});
  // Python attributes only (methods, namespace / loop attributes), never dict keys.
  const std::string name = bound.get(0).str();
  if (input.is_undefined()) undefined_error(input);
  if (auto method = builtin_attribute(input, name)) return std::move(*method);
  if (input.is_object()) return input.as_object().get_attr(name);
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", input.type_name(), name));
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
  if (input.is_float()) {
    const double number = input.as_number();
    if (!std::isfinite(number)) runtime_error("cannot convert float {} to integer", py_float_repr(number));
    return Value::integer(static_cast<int64_t>(number));
  }
  if (!input.is_string()) return fallback;
  if (auto value = parse_python_int(input.as_string(), static_cast<int>(bound.get_int(1, 10))))
    return Value::integer(*value);
  if (auto value = parse_python_float(input.as_string()); value && std::isfinite(*value)) {
    return Value::integer(static_cast<int64_t>(*value));
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
      return Value::integer(static_cast<int64_t>(python_round(static_cast<double>(input.as_int()), precision)));
    }
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
      {"attr", filter_attr},
      {"batch", filter_batch},
      {"capitalize", filter_capitalize},
      {"center", filter_center},
      {"count", filter_length},
      {"d", filter_default},
      {"default", filter_default},
      {"dictsort", filter_dictsort},
      {"e", filter_escape},
      {"escape", filter_escape},
      {"first", filter_first},
      {"float", filter_float},
      {"forceescape", filter_escape},
      {"format", filter_format},
      {"indent", filter_indent},
      {"int", filter_int},
      {"items", filter_items},
      {"join", filter_join},
      {"last", filter_last},
      {"length", filter_length},
      {"list", filter_list},
      {"lower", filter_lower},
      {"map", filter_map},
      {"max", filter_max},
      {"min", filter_min},
      {"reject", filter_reject},
      {"rejectattr", filter_rejectattr},
      {"replace", filter_replace},
      {"reverse", filter_reverse},
      {"round", filter_round},
      {"safe", filter_safe},
      {"select", filter_select},
      {"selectattr", filter_selectattr},
      {"sort", filter_sort},
      {"string", filter_string},
      {"sum", filter_sum},
      {"title", filter_title},
      {"tojson", filter_tojson},
      {"trim", filter_trim},
      {"unique", filter_unique},
      {"upper", filter_upper},
      {"wordcount", filter_wordcount},
  };
  return table;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  const auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

}  // namespace tide::jinja
