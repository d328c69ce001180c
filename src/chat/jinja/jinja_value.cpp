// Value: construction, Python truthiness / str / repr / equality / ordering, hashing for dict keys. json.dumps
// (tojson) is in jinja_json.cpp.
#include "chat/jinja/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "chat/jinja/jinja_bigint.h"
#include "chat/jinja/jinja_strings.h"

namespace tide::jinja {

namespace {

void check_depth(int depth) {
  if (depth > kMaxNestingDepth) runtime_error("containers nested deeper than {} levels", kMaxNestingDepth);
}

std::string join_repr(const std::vector<Value>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    out += items[i].repr();
  }
  return out;
}

std::string sequence_repr(const List& list) {
  switch (list.kind) {
    case SequenceKind::kList:
      return "[" + join_repr(list.items) + "]";
    case SequenceKind::kTuple:
      return "(" + join_repr(list.items) + (list.items.size() == 1 ? ",)" : ")");
    case SequenceKind::kIterator:
      break;
  }
  return "<generator object>";
}

std::string dict_repr(const Dict& dict) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : dict.entries()) {
    if (!first) out += ", ";
    first = false;
    out += key.repr() + ": " + value.repr();
  }
  return out + "}";
}

}  // namespace

// --- construction ---

Value Value::undefined(std::string hint) {
  return Value(UndefinedState{std::make_shared<const std::string>(std::move(hint))});
}
Value Value::none() { return Value(Storage(nullptr)); }
Value Value::boolean(bool value) { return Value(Storage(value)); }
Value Value::integer(int64_t value) { return Value(Storage(value)); }
Value Value::real(double value) { return Value(Storage(value)); }

Value Value::big_integer(std::string_view decimal) {
  auto text = canonical_integer_text(decimal);
  if (!text) runtime_error("invalid integer literal '{}'", decimal);
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (error == std::errc() && end == text->data() + text->size()) return integer(value);
  return Value(Storage(std::make_shared<const BigInt>(BigInt{std::move(*text)})));
}
Value Value::string(std::string value) { return Value(Storage(std::make_shared<const std::string>(std::move(value)))); }

Value Value::list(std::vector<Value> items, SequenceKind kind) {
  int depth = 0;
  int64_t weight = 1;
  for (const Value& item : items) {
    depth = std::max(depth, item.depth());
    weight = std::min<int64_t>(weight + item.weight(), INT64_MAX / 4);
  }
  check_depth(depth + 1);
  return Value(Storage(std::make_shared<const List>(List{std::move(items), kind, depth + 1, weight})));
}

Value Value::dict(Dict dict) { return Value(Storage(std::make_shared<const Dict>(std::move(dict)))); }

Value Value::function(std::string name, FunctionBody body) {
  return Value(Storage(std::make_shared<const Function>(Function{std::move(name), std::move(body)})));
}

Value Value::object(std::shared_ptr<Object> object) { return Value(Storage(std::move(object))); }

// --- accessors ---

int64_t Value::as_int() const {
  if (is_big_int()) runtime_error("int too large to convert to a 64-bit integer");
  return is_bool() ? static_cast<int64_t>(as_bool()) : std::get<int64_t>(storage_);
}

double Value::as_number() const {
  if (is_float()) return std::get<double>(storage_);
  if (is_big_int()) return big_int_to_double(big_int_text());
  return static_cast<double>(as_int());
}

const std::string& Value::big_int_text() const { return std::get<std::shared_ptr<const BigInt>>(storage_)->text; }

int Value::depth() const {
  if (is_list()) return as_list().depth;
  if (is_dict()) return as_dict().depth();
  return 0;
}

int64_t Value::weight() const {
  switch (kind()) {
    case Kind::kString:
      return 1 + static_cast<int64_t>(as_string().size() / 64);
    case Kind::kBigInt:
      return 1 + static_cast<int64_t>(big_int_text().size() / 64);
    case Kind::kList:
      return as_list().weight;
    case Kind::kDict:
      return as_dict().weight();
    default:
      return 1;
  }
}

std::string Value::undefined_message() const {
  const auto& hint = std::get<UndefinedState>(storage_).hint;
  return hint && !hint->empty() ? *hint : "value is undefined";
}

// --- Python protocol ---

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_number() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return sequence_kind() == SequenceKind::kIterator || !items().empty();
    case Kind::kDict:
      return !as_dict().empty();
    case Kind::kFunction:
    case Kind::kObject:
    case Kind::kBigInt:  // never 0
      return true;
  }
  return false;
}

std::string Value::str() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return as_string();
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return as_bool() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(as_int());
    case Kind::kBigInt:
      return big_int_text();
    case Kind::kFloat:
      return py_float_repr(as_number());
    case Kind::kString:
      return py_repr_string(as_string());
    case Kind::kList:
      return sequence_repr(as_list());
    case Kind::kDict:
      return dict_repr(as_dict());
    case Kind::kFunction:
      return "<function " + as_function().name + ">";
    case Kind::kObject:
      return as_object().repr();
  }
  return "";
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
    case Kind::kBigInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return sequence_kind() == SequenceKind::kList    ? "list"
             : sequence_kind() == SequenceKind::kTuple ? "tuple"
                                                       : "generator";
    case Kind::kDict:
      return "dict";
    case Kind::kFunction:
      return "function";
    case Kind::kObject:
      return as_object().type_name();
  }
  return "object";
}

void Object::set_attr(const std::string& name, Value) {
  runtime_error("cannot assign attribute '{}' of a {} object", name, type_name());
}

std::string Object::repr() const { return "<" + type_name() + " object>"; }

// --- hashing and Dict ---

std::optional<std::string> hash_key(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "U";
    case Value::Kind::kNone:
      return "N";
    case Value::Kind::kBool:
    case Value::Kind::kInt:
      return "i" + std::to_string(value.as_int());
    case Value::Kind::kBigInt:
      return "i" + value.big_int_text();
    case Value::Kind::kFloat: {  // an integral float hashes as the equal int (of any size)
      const double number = value.as_number();
      if (std::isfinite(number) && number == std::floor(number)) return "i" + integral_float_text(number);
      return "f" + py_float_repr(number);
    }
    case Value::Kind::kString:
      return "s" + value.as_string();
    case Value::Kind::kList: {
      if (value.sequence_kind() != SequenceKind::kTuple) return std::nullopt;
      std::string key = "t";
      for (const Value& item : value.items()) {
        const auto item_key = hash_key(item);
        if (!item_key) return std::nullopt;
        key += std::to_string(item_key->size()) + ":" + *item_key;
      }
      return key;
    }
    case Value::Kind::kDict:
      return std::nullopt;
    case Value::Kind::kFunction:
      return fmt::format("p{}", static_cast<const void*>(&value.as_function()));
    case Value::Kind::kObject:
      return fmt::format("p{}", static_cast<const void*>(&value.as_object()));
  }
  return std::nullopt;
}

static std::string required_hash_key(const Value& key) {
  auto hashed = hash_key(key);
  if (!hashed) runtime_error("unhashable type: '{}'", key.type_name());
  return std::move(*hashed);
}

const Value* Dict::find(const Value& key) const {
  const auto it = index_.find(required_hash_key(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Value* Dict::find(std::string_view key) const {
  std::string hashed = "s";
  hashed += key;
  const auto it = index_.find(hashed);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Dict::set(Value key, Value value) {
  depth_ = std::max(depth_, value.depth() + 1);
  weight_ = std::min<int64_t>(weight_ + key.weight() + value.weight(), INT64_MAX / 4);
  check_depth(depth_);
  auto [it, inserted] = index_.emplace(required_hash_key(key), entries_.size());
  if (inserted) {
    entries_.emplace_back(std::move(key), std::move(value));
  } else {
    entries_[it->second].second = std::move(value);
  }
}

// --- equality and ordering ---

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return compare_numbers(a, b) == 0;
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      if (a.sequence_kind() != b.sequence_kind()) return false;
      if (a.sequence_kind() == SequenceKind::kIterator) return &a.as_list() == &b.as_list();
      const auto& x = a.items();
      const auto& y = b.items();
      return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin(), equals);
    }
    case Value::Kind::kDict: {
      if (a.as_dict().size() != b.as_dict().size()) return false;
      for (const auto& [key, value] : a.as_dict().entries()) {
        const Value* other = b.as_dict().find(key);
        if (other == nullptr || !equals(value, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kFunction:
      return &a.as_function() == &b.as_function();
    case Value::Kind::kObject:
      return &a.as_object() == &b.as_object();
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is_number() && b.is_number()) return compare_numbers(a, b).value_or(0);  // NaN: neither < nor >
  if (a.is_string() && b.is_string()) {
    const int order = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
    return order < 0 ? -1 : order > 0 ? 1 : 0;
  }
  const bool sequences = a.is_list() && b.is_list() && a.sequence_kind() == b.sequence_kind() &&
                         a.sequence_kind() != SequenceKind::kIterator;
  if (!sequences) {
    runtime_error("'{}' not supported between instances of '{}' and '{}'", op, a.type_name(), b.type_name());
  }
  const auto& x = a.items();
  const auto& y = b.items();
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (!equals(x[i], y[i])) return compare(x[i], y[i], op);
  }
  return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
}

}  // namespace tide::jinja
