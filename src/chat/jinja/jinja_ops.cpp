// Python operators and jinja2's attribute / item access (see jinja_ops.h).
#include "chat/jinja/jinja_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "chat/jinja/jinja_bigint.h"
#include "chat/jinja/jinja_builtins.h"
#include "chat/jinja/jinja_eval.h"
#include "chat/jinja/jinja_strings.h"

namespace tide::jinja {

namespace {

const char* op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSub:
      return "-";
    case BinaryOp::kMul:
      return "*";
    case BinaryOp::kDiv:
      return "/";
    case BinaryOp::kFloorDiv:
      return "//";
    case BinaryOp::kMod:
      return "%";
    case BinaryOp::kPow:
      return "** or pow()";
    default:
      return "?";
  }
}

[[noreturn]] void unsupported(BinaryOp op, const Value& left, const Value& right) {
  runtime_error("unsupported operand type(s) for {}: '{}' and '{}'", op_symbol(op), left.type_name(),
                right.type_name());
}

[[noreturn]] void overflow_error() { runtime_error("integer overflow (tide's template integers are 64-bit)"); }

int64_t add_checked(int64_t a, int64_t b) {
  int64_t result = 0;
  if (__builtin_add_overflow(a, b, &result)) overflow_error();
  return result;
}

int64_t sub_checked(int64_t a, int64_t b) {
  int64_t result = 0;
  if (__builtin_sub_overflow(a, b, &result)) overflow_error();
  return result;
}

int64_t mul_checked(int64_t a, int64_t b) {
  int64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result)) overflow_error();
  return result;
}

// Python's float floor division and modulo (the result of % takes the divisor's sign).
std::pair<double, double> float_divmod(double x, double y) {
  if (y == 0) runtime_error("float division by zero");
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  double floor_div;
  if (div != 0) {
    floor_div = std::floor(div);
    if (div - floor_div > 0.5) floor_div += 1.0;
  } else {
    floor_div = std::copysign(0.0, x / y);
  }
  return {floor_div, mod};
}

std::pair<int64_t, int64_t> int_divmod(int64_t x, int64_t y) {
  if (y == 0) runtime_error("integer division or modulo by zero");
  if (x == std::numeric_limits<int64_t>::min() && y == -1) overflow_error();
  int64_t div = x / y;
  int64_t mod = x % y;
  if (mod != 0 && ((mod < 0) != (y < 0))) {
    mod += y;
    div -= 1;
  }
  return {div, mod};
}

Value int_pow(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    if (base == 0) runtime_error("0.0 cannot be raised to a negative power");
    return Value::real(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  }
  int64_t result = 1;
  for (int64_t factor = base; exponent > 0; exponent >>= 1) {
    if (exponent & 1) result = mul_checked(result, factor);
    if (exponent > 1) factor = mul_checked(factor, factor);
  }
  return Value::integer(result);
}

Value arithmetic(BinaryOp op, const Value& left, const Value& right) {
  if (left.is_int() && right.is_int()) {
    const int64_t x = left.as_int();
    const int64_t y = right.as_int();
    switch (op) {
      case BinaryOp::kAdd:
        return Value::integer(add_checked(x, y));
      case BinaryOp::kSub:
        return Value::integer(sub_checked(x, y));
      case BinaryOp::kMul:
        return Value::integer(mul_checked(x, y));
      case BinaryOp::kDiv:
        if (y == 0) runtime_error("division by zero");
        return Value::real(static_cast<double>(x) / static_cast<double>(y));
      case BinaryOp::kFloorDiv:
        return Value::integer(int_divmod(x, y).first);
      case BinaryOp::kMod:
        return Value::integer(int_divmod(x, y).second);
      case BinaryOp::kPow:
        return int_pow(x, y);
      default:
        break;
    }
  }
  const double x = left.as_number();
  const double y = right.as_number();
  switch (op) {
    case BinaryOp::kAdd:
      return Value::real(x + y);
    case BinaryOp::kSub:
      return Value::real(x - y);
    case BinaryOp::kMul:
      return Value::real(x * y);
    case BinaryOp::kDiv:
      if (y == 0) runtime_error("float division by zero");
      return Value::real(x / y);
    case BinaryOp::kFloorDiv:
      return Value::real(float_divmod(x, y).first);
    case BinaryOp::kMod:
      return Value::real(float_divmod(x, y).second);
    case BinaryOp::kPow:
      if (x == 0 && y < 0) runtime_error("0.0 cannot be raised to a negative power");
      if (x < 0 && y != std::floor(y)) runtime_error("negative number raised to a fractional power");
      return Value::real(std::pow(x, y));
    default:
      break;
  }
  unsupported(op, left, right);
}

Value repeat(Evaluator& evaluator, const Value& sequence, int64_t count) {
  count = std::max<int64_t>(count, 0);
  if (sequence.is_string()) {
    const std::string& text = sequence.as_string();
    if (!text.empty() && static_cast<uint64_t>(count) > (size_t{1} << 40) / text.size()) evaluator.check_size(SIZE_MAX);
    evaluator.check_size(text.size() * static_cast<size_t>(count));
    evaluator.charge(1 + static_cast<int64_t>(text.size()) * count / 64);
    std::string out;
    out.reserve(text.size() * static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) out += text;
    return Value::string(std::move(out));
  }
  const auto& items = sequence.items();
  if (!items.empty() && static_cast<uint64_t>(count) > (size_t{1} << 40) / items.size()) evaluator.check_size(SIZE_MAX);
  evaluator.check_size(items.size() * static_cast<size_t>(count));
  evaluator.charge(1 + static_cast<int64_t>(items.size()) * count);
  std::vector<Value> out;
  for (int64_t i = 0; i < count; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), sequence.sequence_kind());
}

bool is_concrete_sequence(const Value& value) {
  return value.is_list() && value.sequence_kind() != SequenceKind::kIterator;
}

// +, * on strings and sequences; nullopt when the operands are not those.
std::optional<Value> sequence_op(Evaluator& evaluator, BinaryOp op, const Value& left, const Value& right) {
  if (op == BinaryOp::kAdd && left.is_string() && right.is_string()) {
    evaluator.check_size(left.as_string().size() + right.as_string().size());
    evaluator.charge(1 + static_cast<int64_t>(left.as_string().size() + right.as_string().size()) / 64);
    return Value::string(left.as_string() + right.as_string());
  }
  if (op == BinaryOp::kAdd && is_concrete_sequence(left) && is_concrete_sequence(right) &&
      left.sequence_kind() == right.sequence_kind()) {
    std::vector<Value> items = left.items();
    items.insert(items.end(), right.items().begin(), right.items().end());
    evaluator.charge(static_cast<int64_t>(items.size()));
    return Value::list(std::move(items), left.sequence_kind());
  }
  if (op == BinaryOp::kMul) {
    if ((left.is_string() || is_concrete_sequence(left)) && right.is_int())
      return repeat(evaluator, left, right.as_int());
    if (left.is_int() && (right.is_string() || is_concrete_sequence(right)))
      return repeat(evaluator, right, left.as_int());
  }
  if (op == BinaryOp::kMod && left.is_string()) {
    const bool tuple = right.is_list() && right.sequence_kind() == SequenceKind::kTuple;
    std::string text = percent_format(left.as_string(), tuple ? right.items() : std::vector<Value>{right});
    evaluator.check_size(text.size());
    return Value::string(std::move(text));
  }
  return std::nullopt;
}

}  // namespace

void undefined_error(const Value& undefined) { runtime_error("{}", undefined.undefined_message()); }

Value binary_op(Evaluator& evaluator, BinaryOp op, const Value& left, const Value& right) {
  if (op == BinaryOp::kConcat) {
    std::string text = left.str();
    text += right.str();
    evaluator.check_size(text.size());
    evaluator.charge(1 + static_cast<int64_t>(text.size()) / 64);
    return Value::string(std::move(text));
  }
  if (left.is_undefined()) undefined_error(left);
  if (right.is_undefined()) undefined_error(right);
  if (auto result = sequence_op(evaluator, op, left, right)) return std::move(*result);
  if (!left.is_number() || !right.is_number()) unsupported(op, left, right);
  return arithmetic(op, left, right);
}

Value unary_op(UnaryOp op, const Value& operand) {
  if (op == UnaryOp::kNot) return Value::boolean(!operand.truthy());
  if (operand.is_undefined()) undefined_error(operand);
  if (!operand.is_number()) {
    runtime_error("bad operand type for unary {}: '{}'", op == UnaryOp::kNeg ? "-" : "+", operand.type_name());
  }
  if (op == UnaryOp::kPos) return operand.is_bool() ? Value::integer(operand.as_int()) : operand;
  if (operand.is_float()) return Value::real(-operand.as_number());
  if (operand.is_big_int()) return negate_big_int(operand);
  if (operand.as_int() == INT64_MIN) return Value::big_integer("9223372036854775808");  // -(-2**63)
  return Value::integer(sub_checked(0, operand.as_int()));
}

bool compare_op(CompareOp op, const Value& left, const Value& right) {
  static constexpr const char* kSymbols[] = {"==", "!=", "<", "<=", ">", ">="};
  switch (op) {
    case CompareOp::kEq:
      return equals(left, right);
    case CompareOp::kNe:
      return !equals(left, right);
    case CompareOp::kIn:
      return contains(right, left);
    case CompareOp::kNotIn:
      return !contains(right, left);
    default:
      break;
  }
  if (left.is_undefined()) undefined_error(left);
  if (right.is_undefined()) undefined_error(right);
  const int order = compare(left, right, kSymbols[static_cast<int>(op)]);
  switch (op) {
    case CompareOp::kLt:
      return order < 0;
    case CompareOp::kLe:
      return order <= 0;
    case CompareOp::kGt:
      return order > 0;
    default:
      return order >= 0;
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        runtime_error("'in <string>' requires string as left operand, not {}", item.type_name());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      return std::any_of(container.items().begin(), container.items().end(),
                         [&](const Value& element) { return equals(element, item); });
    case Value::Kind::kDict:
      return container.as_dict().find(item) != nullptr;
    default:
      runtime_error("argument of type '{}' is not iterable", container.type_name());
  }
}

// --- attribute and item access ---

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) undefined_error(object);
  if (auto method = builtin_attribute(object, name)) return std::move(*method);
  if (object.is_dict()) {
    if (const Value* value = object.as_dict().find(name)) return *value;
  } else if (object.is_object()) {
    return object.as_object().get_attr(name);
  }
  return Value::undefined(
      fmt::format("'{}' has no attribute '{}'", object.is_dict() ? "dict object" : object.type_name(), name));
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) undefined_error(object);
  if (object.is_dict() && hash_key(key)) {
    if (const Value* value = object.as_dict().find(key)) return *value;
  } else if ((object.is_string() || is_concrete_sequence(object)) && key.is_int()) {
    const bool is_text = object.is_string();
    const std::u32string code_points = is_text ? decode_utf8(object.as_string()) : std::u32string();
    const int64_t size =
        is_text ? static_cast<int64_t>(code_points.size()) : static_cast<int64_t>(object.items().size());
    int64_t index = key.as_int();
    if (index < 0) index += size;
    if (index >= 0 && index < size) {
      return is_text ? Value::string(encode_utf8(code_points.substr(index, 1))) : object.items()[index];
    }
    return Value::undefined(fmt::format("{} index out of range", object.type_name()));
  }
  if (key.is_string()) {
    if (auto method = builtin_attribute(object, key.as_string())) return std::move(*method);
    if (object.is_object()) return object.as_object().get_attr(key.as_string());
  }
  return Value::undefined(
      fmt::format("'{}' has no attribute {}", object.is_dict() ? "dict object" : object.type_name(), key.repr()));
}

Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  if (object.is_undefined()) undefined_error(object);
  const auto bound = [](const Value& value) -> std::optional<std::optional<int64_t>> {
    if (value.is_undefined() || value.is_none()) return std::optional<int64_t>();
    if (value.is_int()) return std::optional<int64_t>(value.as_int());
    return std::nullopt;  // not an index: TypeError, which jinja2 turns into undefined
  };
  const auto start_index = bound(start), stop_index = bound(stop), step_size = bound(step);
  if (!(object.is_string() || is_concrete_sequence(object)) || !start_index || !stop_index || !step_size) {
    return Value::undefined("slice of a value that cannot be sliced");
  }
  const int64_t step_value = step_size->value_or(1);
  if (step_value == 0) runtime_error("slice step cannot be zero");
  const bool is_text = object.is_string();
  const std::u32string code_points = is_text ? decode_utf8(object.as_string()) : std::u32string();
  const int64_t size = is_text ? static_cast<int64_t>(code_points.size()) : static_cast<int64_t>(object.items().size());
  const auto adjust = [&](std::optional<int64_t> index, int64_t if_missing) {
    if (!index) return if_missing;
    int64_t i = *index;
    if (i < 0) {
      i += size;
      if (i < 0) i = step_value < 0 ? -1 : 0;
    } else if (i >= size) {
      i = step_value < 0 ? size - 1 : size;
    }
    return i;
  };
  const int64_t first = adjust(*start_index, step_value < 0 ? size - 1 : 0);
  const int64_t last = adjust(*stop_index, step_value < 0 ? -1 : size);
  std::vector<int64_t> indices;
  for (int64_t i = first; step_value > 0 ? i < last : i > last; i += step_value) indices.push_back(i);
  if (is_text) {
    std::u32string out;
    for (int64_t i : indices) out.push_back(code_points[i]);
    return Value::string(encode_utf8(out));
  }
  std::vector<Value> out;
  for (int64_t i : indices) out.push_back(object.items()[i]);
  return Value::list(std::move(out), object.sequence_kind());
}

std::vector<Value> iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return value.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(value.as_dict().size());
      for (const auto& entry : value.as_dict().entries()) keys.push_back(entry.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t cp : decode_utf8(value.as_string())) {
        std::string text;
        append_utf8(text, cp);
        chars.push_back(Value::string(std::move(text)));
      }
      return chars;
    }
    default:
      runtime_error("'{}' object is not iterable", value.type_name());
  }
}

}  // namespace tide::jinja
