// Value: what jinja2 templates compute with, modelled on the Python objects transformers hands to jinja2:
// undefined (jinja2's default Undefined), None, bool, int, float, str (UTF-8), list / tuple / iterator, dict
// (insertion-ordered), callables (builtins, macros, bound methods) and objects (namespace, loop).
// Lists and dicts are immutable once built, as in jinja2's ImmutableSandboxedEnvironment, so a Value is a cheap
// copy that shares them. Namespaces are the one mutable thing ({% set ns.x = ... %}).
// Integers are 64-bit; an integer beyond that comes only from the data (JSON: a uint64 above INT64_MAX, or a big
// integer of json_exact.h) and is a "big int" held as its decimal text: it prints, serializes (tojson), orders
// and compares (==, <, in, dict keys) exactly as Python's int does, negates and takes abs / int / round / even /
// odd exactly; other arithmetic on it converts it to float (Python would stay exact), and arithmetic on 64-bit
// integers that overflows is an error.
// Non-goals: sets, bytes, Markup (autoescape is off in transformers, so |safe is the identity and |escape
// returns plain text).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "chat/json_exact.h"
#include "core/error.h"

namespace tide::jinja {

struct BigInt;
class Dict;
class Evaluator;
class Object;
class Value;
struct Function;
struct List;

// An error of the template's evaluation (jinja2's TypeError, UndefinedError, ...) not yet given its line; the
// evaluator rethrows it as tide::Error naming the template line.
class RuntimeError : public Error {
 public:
  using Error::Error;
};

template <typename... Args>
[[noreturn]] void runtime_error(fmt::format_string<Args...> format, Args&&... args) {
  throw RuntimeError(fmt::format(format, std::forward<Args>(args)...));
}

// Python's int() of a float: truncated toward zero. Python's result may be any size; tide's integers are 64-bit,
// so a value outside their range (and inf, nan) is a RuntimeError, never an undefined conversion.
inline int64_t float_to_int(double number) {
  if (!(number >= -0x1p63 && number < 0x1p63)) runtime_error("cannot convert float {} to a 64-bit integer", number);
  return static_cast<int64_t>(number);
}

enum class SequenceKind : uint8_t {
  kList,
  kTuple,
  kIterator,  // a generator / iterator (map, select, reverse, ...): always true, no len(), not subscriptable
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kFunction,
    kObject,
    kBigInt,  // an int beyond 64 bits
  };

  Value() = default;  // undefined
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool value);
  static Value integer(int64_t value);
  // A Python int given by its decimal text ("-" then digits): an int when it fits 64 bits, else a big int.
  // Throws RuntimeError on other text.
  static Value big_integer(std::string_view decimal);
  static Value real(double value);
  static Value string(std::string value);
  static Value list(std::vector<Value> items, SequenceKind kind = SequenceKind::kList);
  static Value dict(Dict dict);
  static Value function(std::string name, std::function<Value(Evaluator&, struct CallArgs&)> body);
  static Value object(std::shared_ptr<Object> object);

  Kind kind() const { return static_cast<Kind>(storage_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  // A 64-bit int (bool is an int, as in Python); false for a big int.
  bool is_int() const { return kind() == Kind::kInt || kind() == Kind::kBool; }
  bool is_big_int() const { return kind() == Kind::kBigInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_big_int(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_function() const { return kind() == Kind::kFunction; }
  bool is_object() const { return kind() == Kind::kObject; }

  bool as_bool() const { return std::get<bool>(storage_); }
  int64_t as_int() const;  // bool or int; RuntimeError for a big int (too large for the operation)
  // bool, int, big int (the nearest double; RuntimeError beyond double's range, as Python's float()) or float.
  double as_number() const;
  // A big int's decimal text ("-" then digits).
  const std::string& big_int_text() const;
  const std::string& as_string() const { return *std::get<std::shared_ptr<const std::string>>(storage_); }
  const List& as_list() const { return *std::get<std::shared_ptr<const List>>(storage_); }
  const std::vector<Value>& items() const;
  SequenceKind sequence_kind() const;
  // Nesting depth of a list or dict (1 for a flat one), 0 for anything else.
  int depth() const;
  // Rough cost of walking the value (printing, comparing, serializing): 1 per item at every level, 1 per 64
  // bytes of text. Charged against a render's work budget.
  int64_t weight() const;
  const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(storage_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(storage_); }
  Object& as_object() const { return *std::get<std::shared_ptr<Object>>(storage_); }
  // Why a value is undefined ("'foo' is undefined"), for the error raised when it is used.
  std::string undefined_message() const;

  // Python truthiness; undefined is false, iterators are true.
  bool truthy() const;
  // Python str(): None -> "None", True -> "True", floats by repr, containers by repr of their items;
  // undefined -> "".
  std::string str() const;
  // Python repr().
  std::string repr() const;
  // Python's type name, for error messages ('NoneType', 'int', 'str', 'list', 'dict', ...).
  std::string type_name() const;

 private:
  struct UndefinedState {
    std::shared_ptr<const std::string> hint;
  };
  // Strings are shared, not copied, when values are (message contents are read many times).
  using Storage = std::variant<UndefinedState, std::nullptr_t, bool, int64_t, double,
                               std::shared_ptr<const std::string>, std::shared_ptr<const List>,
                               std::shared_ptr<const Dict>, std::shared_ptr<const Function>, std::shared_ptr<Object>,
                               std::shared_ptr<const BigInt>>;
  explicit Value(Storage storage) : storage_(std::move(storage)) {}

  Storage storage_;
};

// Containers nest at most this deep, so printing, comparing, serializing and freeing them never exhausts the
// stack (a template could otherwise build [[[...]]] in a loop).
inline constexpr int kMaxNestingDepth = 256;

struct BigInt {
  std::string text;  // "-" then digits, no leading zeros; outside int64's range
};

struct List {
  std::vector<Value> items;
  SequenceKind kind = SequenceKind::kList;
  int depth = 1;  // 1 + the deepest item container
  int64_t weight = 1;
};

inline const std::vector<Value>& Value::items() const { return as_list().items; }
inline SequenceKind Value::sequence_kind() const { return as_list().kind; }

// Arguments of a call: positional, then keyword in the order written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using FunctionBody = std::function<Value(Evaluator&, CallArgs&)>;

struct Function {
  std::string name;
  FunctionBody body;
};

// An attribute bag with behaviour: namespace(), the loop variable.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  // The attribute `name`, or undefined.
  virtual Value get_attr(std::string_view name) const = 0;
  // Assigns an attribute; throws RuntimeError unless the object allows it (namespaces do).
  virtual void set_attr(const std::string& name, Value value);
  virtual std::string repr() const;
  // Drops what the object holds (the evaluator's way of breaking reference cycles after a render).
  virtual void clear() {}
};

// A Python dict: insertion-ordered, keys compared by Python equality (1 == 1.0 == True), O(1) lookup.
class Dict {
 public:
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }
  // The value of `key`, or null. Throws RuntimeError for an unhashable key (list, dict).
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  // Inserts or replaces (a replaced key keeps its position).
  void set(Value key, Value value);
  int depth() const { return depth_; }  // 1 + the deepest value container
  int64_t weight() const { return weight_; }

 private:
  std::vector<std::pair<Value, Value>> entries_;
  int depth_ = 1;
  int64_t weight_ = 1;
  std::unordered_map<std::string, size_t> index_;  // hash_key(key) -> position in entries_
};

// A string that is equal for values Python considers equal and hashable (None, bool, int, float, str, tuples of
// those); nullopt for unhashable values.
std::optional<std::string> hash_key(const Value& value);

// Python ==.
bool equals(const Value& a, const Value& b);
// Python ordering (<0, 0, >0) of numbers, strings, and lists / tuples of those; RuntimeError (TypeError)
// otherwise. `op` names the operator for the message.
int compare(const Value& a, const Value& b, std::string_view op = "<");

// json.dumps(value, ensure_ascii=False, indent=..., separators=..., sort_keys=...), as transformers' tojson.
struct JsonOptions {
  std::optional<std::string> indent;  // nullopt: one line; else the text repeated per nesting level
  std::optional<std::pair<std::string, std::string>> separators;  // item, key; default (", ", ": ") or (",", ": ")
  bool sort_keys = false;
};
std::string to_json(const Value& value, const JsonOptions& options = {});

// JSON (nlohmann::json or nlohmann::ordered_json) to a Value: objects become dicts in the JSON's key order,
// integers beyond int64 (uint64 ones, big integers of json_exact.h) big ints.
template <typename Json>
Value from_json(const Json& json) {
  switch (json.type()) {
    case Json::value_t::null:
      return Value::none();
    case Json::value_t::boolean:
      return Value::boolean(json.template get<bool>());
    case Json::value_t::number_integer:
      return Value::integer(json.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const auto value = json.template get<uint64_t>();
      if (value > static_cast<uint64_t>(INT64_MAX)) return Value::big_integer(std::to_string(value));
      return Value::integer(static_cast<int64_t>(value));
    }
    case Json::value_t::number_float:
      return Value::real(json.template get<double>());
    case Json::value_t::string:
      return Value::string(json.template get<std::string>());
    case Json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item));
      return Value::list(std::move(items));
    }
    case Json::value_t::object: {
      Dict dict;
      for (const auto& [key, item] : json.items()) dict.set(Value::string(key), from_json(item));
      return Value::dict(std::move(dict));
    }
    case Json::value_t::binary:
      if (is_big_integer(json)) return Value::big_integer(big_integer_text(json));
      throw Error("chat template: JSON holds a binary value");
    default:
      throw Error("chat template: JSON value of an unsupported type (discarded)");
  }
}

}  // namespace tide::jinja
