// jinja2's builtin tests ({{ x is defined }}, {{ n is divisibleby 3 }}, select('equalto', 1), ...).
#include <cmath>
#include <unordered_map>

#include "chat/jinja/jinja_args.h"
#include "chat/jinja/jinja_bigint.h"
#include "chat/jinja/jinja_builtins.h"
#include "chat/jinja/jinja_ops.h"
#include "chat/jinja/jinja_strings.h"

namespace tide::jinja {

namespace {

bool test_defined(Evaluator&, const Value& input, CallArgs&) { return !input.is_undefined(); }
bool test_undefined(Evaluator&, const Value& input, CallArgs&) { return input.is_undefined(); }
bool test_none(Evaluator&, const Value& input, CallArgs&) { return input.is_none(); }
bool test_boolean(Evaluator&, const Value& input, CallArgs&) { return input.is_bool(); }
bool test_true(Evaluator&, const Value& input, CallArgs&) { return input.is_bool() && input.as_bool(); }
bool test_false(Evaluator&, const Value& input, CallArgs&) { return input.is_bool() && !input.as_bool(); }
bool test_string(Evaluator&, const Value& input, CallArgs&) { return input.is_string(); }
bool test_number(Evaluator&, const Value& input, CallArgs&) { return input.is_number(); }
bool test_integer(Evaluator&, const Value& input, CallArgs&) {
  return input.kind() == Value::Kind::kInt || input.is_big_int();
}
bool test_float(Evaluator&, const Value& input, CallArgs&) { return input.is_float(); }
bool test_mapping(Evaluator&, const Value& input, CallArgs&) { return input.is_dict(); }
bool test_callable(Evaluator&, const Value& input, CallArgs&) { return input.is_function(); }

bool test_iterable(Evaluator&, const Value& input, CallArgs&) {
  return input.is_undefined() || input.is_string() || input.is_list() || input.is_dict();
}

bool test_sequence(Evaluator&, const Value& input, CallArgs&) {
  const bool concrete_list = input.is_list() && input.sequence_kind() != SequenceKind::kIterator;
  return input.is_undefined() || input.is_string() || concrete_list || input.is_dict();
}

bool is_even(const Value& input) {
  if (!input.is_number()) runtime_error("unsupported operand type(s) for %: '{}' and 'int'", input.type_name());
  if (input.is_int()) return input.as_int() % 2 == 0;
  if (input.is_big_int()) return big_int_is_even(input);
  return std::fmod(input.as_number(), 2.0) == 0;
}

bool test_even(Evaluator&, const Value& input, CallArgs&) { return is_even(input); }
bool test_odd(Evaluator&, const Value& input, CallArgs&) {
  if (input.is_float() && !std::isfinite(input.as_number())) return false;
  return !is_even(input);
}

bool test_divisibleby(Evaluator& evaluator, const Value& input, CallArgs& args) {
  BoundArgs bound("divisibleby", args, {"num"});
  return equals(binary_op(evaluator, BinaryOp::kMod, input, bound.get(0)), Value::integer(0));
}

bool test_lower(Evaluator&, const Value& input, CallArgs&) {
  const std::string text = input.str();
  return py_lower(text) == text && py_upper(text) != text;
}

bool test_upper(Evaluator&, const Value& input, CallArgs&) {
  const std::string text = input.str();
  return py_upper(text) == text && py_lower(text) != text;
}

bool test_sameas(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("sameas", args, {"other"});
  const Value& other = bound.get(0);
  if (input.is_none() || other.is_none()) return input.is_none() && other.is_none();
  if (input.is_bool() || other.is_bool())
    return input.is_bool() && other.is_bool() && input.as_bool() == other.as_bool();
  if (input.is_list() && other.is_list()) return &input.as_list() == &other.as_list();
  if (input.is_dict() && other.is_dict()) return &input.as_dict() == &other.as_dict();
  if (input.is_object() && other.is_object()) return &input.as_object() == &other.as_object();
  if (input.is_function() && other.is_function()) return &input.as_function() == &other.as_function();
  return false;
}

template <CompareOp kOp>
bool test_compare(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("compare", args, {"b"});
  return compare_op(kOp, input, bound.get(0));
}

bool test_in(Evaluator&, const Value& input, CallArgs& args) {
  BoundArgs bound("in", args, {"seq"});
  return contains(bound.get(0), input);
}

bool test_filter(Evaluator&, const Value& input, CallArgs&) {
  return input.is_string() && find_filter(input.as_string()) != nullptr;
}

bool test_test(Evaluator&, const Value& input, CallArgs&) {
  return input.is_string() && find_test(input.as_string()) != nullptr;
}

bool test_escaped(Evaluator&, const Value&, CallArgs&) { return false; }

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> table = {
      {"boolean", test_boolean},
      {"callable", test_callable},
      {"defined", test_defined},
      {"divisibleby", test_divisibleby},
      {"escaped", test_escaped},
      {"even", test_even},
      {"false", test_false},
      {"filter", test_filter},
      {"float", test_float},
      {"in", test_in},
      {"integer", test_integer},
      {"iterable", test_iterable},
      {"lower", test_lower},
      {"mapping", test_mapping},
      {"none", test_none},
      {"number", test_number},
      {"odd", test_odd},
      {"sameas", test_sameas},
      {"sequence", test_sequence},
      {"string", test_string},
      {"test", test_test},
      {"true", test_true},
      {"undefined", test_undefined},
      {"upper", test_upper},
      {"eq", test_compare<CompareOp::kEq>},
      {"equalto", test_compare<CompareOp::kEq>},
      {"==", test_compare<CompareOp::kEq>},
      {"ne", test_compare<CompareOp::kNe>},
      {"!=", test_compare<CompareOp::kNe>},
      {"lt", test_compare<CompareOp::kLt>},
      {"lessthan", test_compare<CompareOp::kLt>},
      {"<", test_compare<CompareOp::kLt>},
      {"le", test_compare<CompareOp::kLe>},
      {"<=", test_compare<CompareOp::kLe>},
      {"gt", test_compare<CompareOp::kGt>},
      {"greaterthan", test_compare<CompareOp::kGt>},
      {">", test_compare<CompareOp::kGt>},
      {"ge", test_compare<CompareOp::kGe>},
      {">=", test_compare<CompareOp::kGe>},
  };
  return table;
}

}  // namespace

TestFn find_test(std::string_view name) {
  const auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

}  // namespace tide::jinja
