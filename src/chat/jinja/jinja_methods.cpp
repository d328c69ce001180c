// Methods of str, dict and list values, as jinja2's sandbox exposes Python's (x.strip(), d.get('k'),
// s.split(','), '{}'.format(x), ...). Mutating methods are unsafe attributes: undefined, failing when called.
#include <algorithm>
#include <unordered_map>

#include <utf8proc.h>

#include "chat/jinja/jinja_args.h"
#include "chat/jinja/jinja_builtins.h"
#include "chat/jinja/jinja_eval.h"
#include "chat/jinja/jinja_ops.h"
#include "chat/jinja/jinja_strings.h"

namespace tide::jinja {

namespace {

using Method = Value (*)(Evaluator& evaluator, const Value& self, CallArgs& args);

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  for (std::string& part : parts) items.push_back(Value::string(std::move(part)));
  return Value::list(std::move(items));
}

std::string reversed_text(const std::string& text) {
  std::u32string cps = decode_utf8(text);
  std::reverse(cps.begin(), cps.end());
  return encode_utf8(cps);
}

// --- str ---

Value str_strip(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("strip", args, {"chars"});
  return Value::string(py_strip(self.as_string(), bound.get_optional_string(0), true, true));
}
Value str_lstrip(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("lstrip", args, {"chars"});
  return Value::string(py_strip(self.as_string(), bound.get_optional_string(0), true, false));
}
Value str_rstrip(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("rstrip", args, {"chars"});
  return Value::string(py_strip(self.as_string(), bound.get_optional_string(0), false, true));
}
Value str_upper(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("upper", args, {});
  return Value::string(py_upper(self.as_string()));
}
Value str_lower(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("lower", args, {});
  return Value::string(py_lower(self.as_string()));
}
Value str_title(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("title", args, {});
  return Value::string(py_title(self.as_string()));
}
Value str_capitalize(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("capitalize", args, {});
  return Value::string(py_capitalize(self.as_string()));
}

Value str_split(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("split", args, {"sep", "maxsplit"});
  return string_list(py_split(self.as_string(), bound.get_optional_string(0), bound.get_int(1, -1)));
}

Value str_rsplit(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("rsplit", args, {"sep", "maxsplit"});
  auto sep = bound.get_optional_string(0);
  if (sep) sep = reversed_text(*sep);
  std::vector<std::string> parts = py_split(reversed_text(self.as_string()), sep, bound.get_int(1, -1));
  std::reverse(parts.begin(), parts.end());
  for (std::string& part : parts) part = reversed_text(part);
  return string_list(std::move(parts));
}

Value str_splitlines(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("splitlines", args, {"keepends"});
  if (bound.get_bool(0, false)) runtime_error("splitlines(keepends=True) is not supported");
  return string_list(py_splitlines(self.as_string()));
}

Value str_replace(Evaluator& evaluator, const Value& self, CallArgs& args) {
  BoundArgs bound("replace", args, {"old", "new", "count"});
  if (!bound.get(0).is_string() || !bound.get(1).is_string()) runtime_error("replace() arguments must be str");
  std::string out =
      py_replace(self.as_string(), bound.get(0).as_string(), bound.get(1).as_string(), bound.get_int(2, -1));
  evaluator.check_size(out.size());
  return Value::string(std::move(out));
}

// startswith / endswith with a str or a tuple of str.
bool affix_matches(const Value& affix, const std::string& text, bool at_start) {
  if (affix.is_list()) {
    return std::any_of(affix.items().begin(), affix.items().end(),
                       [&](const Value& item) { return affix_matches(item, text, at_start); });
  }
  if (!affix.is_string()) runtime_error("{}with first arg must be str or a tuple of str", at_start ? "starts" : "ends");
  const std::string& a = affix.as_string();
  if (a.size() > text.size()) return false;
  return at_start ? text.compare(0, a.size(), a) == 0 : text.compare(text.size() - a.size(), a.size(), a) == 0;
}

Value str_startswith(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("startswith", args, {"prefix"});
  return Value::boolean(affix_matches(bound.get(0), self.as_string(), true));
}
Value str_endswith(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("endswith", args, {"suffix"});
  return Value::boolean(affix_matches(bound.get(0), self.as_string(), false));
}

Value str_removeprefix(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("removeprefix", args, {"prefix"});
  const std::string prefix = bound.get(0).str();
  const std::string& text = self.as_string();
  return Value::string(text.compare(0, prefix.size(), prefix) == 0 ? text.substr(prefix.size()) : text);
}
Value str_removesuffix(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("removesuffix", args, {"suffix"});
  const std::string suffix = bound.get(0).str();
  const std::string& text = self.as_string();
  const bool has = !suffix.empty() && text.size() >= suffix.size() &&
                   text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
  return Value::string(has ? text.substr(0, text.size() - suffix.size()) : text);
}

Value find_in(const Value& self, CallArgs& args, bool from_right, bool must_find) {
  BoundArgs bound(from_right ? "rfind" : "find", args, {"sub"});
  if (!bound.get(0).is_string()) runtime_error("must be str, not {}", bound.get(0).type_name());
  const std::string& text = self.as_string();
  const size_t pos = from_right ? text.rfind(bound.get(0).as_string()) : text.find(bound.get(0).as_string());
  if (pos == std::string::npos) {
    if (must_find) runtime_error("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(static_cast<int64_t>(utf8_length(std::string_view(text).substr(0, pos))));
}

Value str_find(Evaluator&, const Value& self, CallArgs& args) { return find_in(self, args, false, false); }
Value str_rfind(Evaluator&, const Value& self, CallArgs& args) { return find_in(self, args, true, false); }
Value str_index(Evaluator&, const Value& self, CallArgs& args) { return find_in(self, args, false, true); }

Value str_count(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("count", args, {"sub"});
  const std::string sub = bound.get(0).str();
  const std::string& text = self.as_string();
  if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(text)) + 1);
  int64_t count = 0;
  for (size_t pos = text.find(sub); pos != std::string::npos; pos = text.find(sub, pos + sub.size())) ++count;
  return Value::integer(count);
}

Value str_join(Evaluator& evaluator, const Value& self, CallArgs& args) {
  BoundArgs bound("join", args, {"iterable"});
  std::string out;
  size_t index = 0;
  for (const Value& item : iterate(bound.get(0))) {
    if (!item.is_string()) runtime_error("sequence item {}: expected str instance, {} found", index, item.type_name());
    if (index++ > 0) out += self.as_string();
    out += item.as_string();
    evaluator.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value str_format(Evaluator& evaluator, const Value& self, CallArgs& args) {
  return Value::string(python_format(evaluator, self.as_string(), args));
}

template <bool (*kPredicate)(char32_t)>
Value str_is(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("is", args, {});
  const std::u32string cps = decode_utf8(self.as_string());
  return Value::boolean(!cps.empty() && std::all_of(cps.begin(), cps.end(), kPredicate));
}

utf8proc_category_t category_of(char32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)); }
bool is_alpha(char32_t cp) {
  return category_of(cp) >= UTF8PROC_CATEGORY_LU && category_of(cp) <= UTF8PROC_CATEGORY_LO;
}
bool is_digit(char32_t cp) { return category_of(cp) == UTF8PROC_CATEGORY_ND; }
bool is_alnum(char32_t cp) {
  return is_alpha(cp) || (category_of(cp) >= UTF8PROC_CATEGORY_ND && category_of(cp) <= UTF8PROC_CATEGORY_NO);
}

Value str_isupper(Evaluator&, const Value& self, CallArgs&) {
  const std::string& text = self.as_string();
  return Value::boolean(py_upper(text) == text && py_lower(text) != text);
}
Value str_islower(Evaluator&, const Value& self, CallArgs&) {
  const std::string& text = self.as_string();
  return Value::boolean(py_lower(text) == text && py_upper(text) != text);
}

Value justify(Evaluator& evaluator, const Value& self, CallArgs& args, const char* name, int side) {
  BoundArgs bound(name, args, {"width", "fillchar"});
  const std::string& text = self.as_string();
  const int64_t width = bound.get_int(0, 0);
  const std::string fill = bound.get_string(1, " ");
  if (utf8_length(fill) != 1) runtime_error("The fill character must be exactly one character long");
  const auto length = static_cast<int64_t>(utf8_length(text));
  if (width <= length) return self;
  evaluator.check_size(static_cast<size_t>(width) * fill.size());
  const int64_t margin = width - length;
  const int64_t left = side < 0 ? 0 : side > 0 ? margin : margin / 2 + (margin & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += text;
  for (int64_t i = left; i < margin; ++i) out += fill;
  return Value::string(std::move(out));
}

Value str_ljust(Evaluator& e, const Value& self, CallArgs& args) { return justify(e, self, args, "ljust", -1); }
Value str_rjust(Evaluator& e, const Value& self, CallArgs& args) { return justify(e, self, args, "rjust", 1); }
Value str_center(Evaluator& e, const Value& self, CallArgs& args) { return justify(e, self, args, "center", 0); }

// --- dict ---

Value dict_get(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("get", args, {"key", "default"});
  const Value* value = self.as_dict().find(bound.get(0));
  return value != nullptr ? *value : bound.get(1, Value::none());
}

Value dict_items(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("items", args, {});
  std::vector<Value> pairs;
  for (const auto& [key, value] : self.as_dict().entries())
    pairs.push_back(Value::list({key, value}, SequenceKind::kTuple));
  return Value::list(std::move(pairs));
}

Value dict_keys(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("keys", args, {});
  return Value::list(iterate(self));
}

Value dict_values(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("values", args, {});
  std::vector<Value> values;
  for (const auto& entry : self.as_dict().entries()) values.push_back(entry.second);
  return Value::list(std::move(values));
}

Value dict_copy(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("copy", args, {});
  return self;
}

// --- list / tuple ---

Value list_count(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("count", args, {"value"});
  return Value::integer(std::count_if(self.items().begin(), self.items().end(),
                                      [&](const Value& item) { return equals(item, bound.get(0)); }));
}

Value list_index(Evaluator&, const Value& self, CallArgs& args) {
  BoundArgs bound("index", args, {"value"});
  const auto& items = self.items();
  for (size_t i = 0; i < items.size(); ++i) {
    if (equals(items[i], bound.get(0))) return Value::integer(static_cast<int64_t>(i));
  }
  runtime_error("{} is not in list", bound.get(0).repr());
}

const std::unordered_map<std::string_view, Method>& string_methods() {
  static const std::unordered_map<std::string_view, Method> table = {
      {"strip", str_strip},
      {"lstrip", str_lstrip},
      {"rstrip", str_rstrip},
      {"upper", str_upper},
      {"lower", str_lower},
      {"title", str_title},
      {"capitalize", str_capitalize},
      {"split", str_split},
      {"rsplit", str_rsplit},
      {"splitlines", str_splitlines},
      {"replace", str_replace},
      {"startswith", str_startswith},
      {"endswith", str_endswith},
      {"removeprefix", str_removeprefix},
      {"removesuffix", str_removesuffix},
      {"find", str_find},
      {"rfind", str_rfind},
      {"index", str_index},
      {"count", str_count},
      {"join", str_join},
      {"format", str_format},
      {"isalpha", str_is<is_alpha>},
      {"isdigit", str_is<is_digit>},
      {"isalnum", str_is<is_alnum>},
      {"isspace", str_is<is_py_space>},
      {"isupper", str_isupper},
      {"islower", str_islower},
      {"ljust", str_ljust},
      {"rjust", str_rjust},
      {"center", str_center},
  };
  return table;
}

const std::unordered_map<std::string_view, Method>& dict_methods() {
  static const std::unordered_map<std::string_view, Method> table = {
      {"get", dict_get}, {"items", dict_items}, {"keys", dict_keys}, {"values", dict_values}, {"copy", dict_copy},
  };
  return table;
}

const std::unordered_map<std::string_view, Method>& list_methods() {
  static const std::unordered_map<std::string_view, Method> table = {{"count", list_count}, {"index", list_index}};
  return table;
}

bool is_unsafe(const Value& object, std::string_view name) {
  static const std::unordered_map<std::string_view, int> list_mutators = {{"append", 0},  {"clear", 0}, {"extend", 0},
                                                                          {"insert", 0},  {"pop", 0},   {"remove", 0},
                                                                          {"reverse", 0}, {"sort", 0}};
  static const std::unordered_map<std::string_view, int> dict_mutators = {
      {"clear", 0}, {"pop", 0}, {"popitem", 0}, {"setdefault", 0}, {"update", 0}};
  if (object.is_list() && object.sequence_kind() == SequenceKind::kList) return list_mutators.count(name) > 0;
  if (object.is_dict()) return dict_mutators.count(name) > 0;
  return false;
}

}  // namespace

std::optional<Value> builtin_attribute(const Value& object, const std::string& name) {
  if (is_unsafe(object, name)) {
    return Value::undefined(
        fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, object.type_name()));
  }
  const std::unordered_map<std::string_view, Method>* table = nullptr;
  if (object.is_string()) {
    table = &string_methods();
  } else if (object.is_dict()) {
    table = &dict_methods();
  } else if (object.is_list() && object.sequence_kind() != SequenceKind::kIterator) {
    table = &list_methods();
  }
  if (table == nullptr) return std::nullopt;
  const auto it = table->find(name);
  if (it == table->end()) return std::nullopt;
  const Method method = it->second;
  return Value::function(
      name, [method, object](Evaluator& evaluator, CallArgs& args) { return method(evaluator, object, args); });
}

}  // namespace tide::jinja
