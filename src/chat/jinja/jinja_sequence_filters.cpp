// jinja2's sequence filters (3.1 semantics): length, first, last, list, reverse, join, sort, dictsort, unique,
// min, max, sum, batch, items, map, select / reject / selectattr / rejectattr, attr. Those that return
// generators in jinja2 (map, select, reject, selectattr, rejectattr, unique, reverse of a list, items, batch)
// return iterator-kind lists here: always true, no length, printed as a generator.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "chat/jinja/jinja_args.h"
#include "chat/jinja/jinja_builtins.h"
#include "chat/jinja/jinja_eval.h"
#include "chat/jinja/jinja_filter_util.h"
#include "chat/jinja/jinja_ops.h"
#include "chat/jinja/jinja_strings.h"

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

const std::unordered_map<std::string_view, FilterFn>& sequence_filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"attr", filter_attr},
      {"batch", filter_batch},
      {"count", filter_length},
      {"dictsort", filter_dictsort},
      {"first", filter_first},
      {"items", filter_items},
      {"join", filter_join},
      {"last", filter_last},
      {"length", filter_length},
      {"list", filter_list},
      {"map", filter_map},
      {"max", filter_max},
      {"min", filter_min},
      {"reject", filter_reject},
      {"rejectattr", filter_rejectattr},
      {"reverse", filter_reverse},
      {"select", filter_select},
      {"selectattr", filter_selectattr},
      {"sort", filter_sort},
      {"sum", filter_sum},
      {"unique", filter_unique},
  };
  return table;
}

}  // namespace

FilterFn find_sequence_filter(std::string_view name) {
  const auto it = sequence_filters().find(name);
  return it == sequence_filters().end() ? nullptr : it->second;
}

}  // namespace tide::jinja
