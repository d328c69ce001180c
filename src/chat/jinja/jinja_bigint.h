// Big ints (Python ints beyond 64 bits, which tide holds as their decimal text; see jinja_value.h): the
// operations tide does exactly on them: ordering and equality against any number, sign, parity.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "chat/jinja/jinja_value.h"

namespace tide::jinja {

// The canonical text of an integer literal ("-" or nothing, then digits; leading zeros dropped, "0" for zero), or
// nullopt when `text` is not one.
std::optional<std::string> canonical_integer_text(std::string_view text);

// Python's ordering of two numbers (bool, int, big int, float), exact between ints of any size and floats
// (Python compares 2**53 + 1 and 2.0**53 exactly too): -1, 0, 1, or nullopt when unordered (a NaN).
std::optional<int> compare_numbers(const Value& a, const Value& b);

// The exact digits of an integral double: 1e20 -> "100000000000000000000", -0.0 -> "0".
std::string integral_float_text(double value);

// -x and abs(x) of a big int, exactly (the result may fit 64 bits: -(2**63) is an int).
Value negate_big_int(const Value& value);
Value abs_big_int(const Value& value);
bool big_int_is_even(const Value& value);

// The nearest double to a big int's text; RuntimeError beyond double's range, as Python's float(int).
double big_int_to_double(const std::string& text);

}  // namespace tide::jinja
