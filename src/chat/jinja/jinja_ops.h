// Python operators and jinja2's sandboxed attribute / item access over Values. Errors are RuntimeError with
// Python's wording ("unsupported operand type(s) for +: 'int' and 'str'"); using an undefined value where
// jinja2's Undefined fails (arithmetic, ordering, attribute access, calls) raises its undefined message.
#pragma once

#include <string>
#include <vector>

#include "chat/jinja/jinja_ast.h"
#include "chat/jinja/jinja_value.h"

namespace tide::jinja {

class Evaluator;

[[noreturn]] void undefined_error(const Value& undefined);

// + - * / // % ** and ~ (and / or short-circuit in the evaluator).
Value binary_op(Evaluator& evaluator, BinaryOp op, const Value& left, const Value& right);
Value unary_op(UnaryOp op, const Value& operand);
bool compare_op(CompareOp op, const Value& left, const Value& right);
// Python `item in container`: substring, list / tuple element, dict key; false for undefined.
bool contains(const Value& container, const Value& item);

// obj.name: a method of str / dict / list, else a dict key or an object's attribute, else undefined.
Value get_attribute(const Value& object, const std::string& name);
// obj[key]: dict key, list / str index (negative from the end), else as get_attribute for a str key, else
// undefined.
Value get_item(const Value& object, const Value& key);
// obj[start:stop:step] of a str, list or tuple (each bound may be none / undefined); undefined otherwise.
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);

// The items a for loop sees: list / tuple items, dict keys, a string's characters; none for undefined.
// Throws RuntimeError for anything else ("'int' object is not iterable").
std::vector<Value> iterate(const Value& value);

// Python's "%s %d" % args, as str.__mod__ and the format filter use it (s, r, d, i, f, e, g, x, o, c, %
// with flags, width and precision).
std::string percent_format(const std::string& format, const std::vector<Value>& args);

// Python's str.format: {} / {0} / {name} fields with .attr and [key] lookups, !r / !s conversions and the
// format spec [[fill]align][sign][0][width][,][.precision][type] for str, int and float values.
std::string python_format(Evaluator& evaluator, const std::string& format, const CallArgs& args);

}  // namespace tide::jinja
