// Big ints: exact ordering against ints and floats, sign and parity on decimal text (see jinja_bigint.h).
#include "chat/jinja/jinja_bigint.h"

#include <cmath>
#include <cstdlib>

namespace tide::jinja {

namespace {

// Orders two canonical integer texts.
int compare_integer_text(std::string_view a, std::string_view b) {
  const bool a_negative = a[0] == '-';
  const bool b_negative = b[0] == '-';
  if (a_negative != b_negative) return a_negative ? -1 : 1;
  const std::string_view x = a_negative ? a.substr(1) : a;
  const std::string_view y = b_negative ? b.substr(1) : b;
  int magnitude = 0;
  if (x.size() != y.size()) {
    magnitude = x.size() < y.size() ? -1 : 1;
  } else {
    const int order = x.compare(y);
    magnitude = order < 0 ? -1 : order > 0 ? 1 : 0;
  }
  return a_negative ? -magnitude : magnitude;
}

std::string integer_text(const Value& value) {
  return value.is_big_int() ? value.big_int_text() : std::to_string(value.as_int());
}

}  // namespace

std::optional<std::string> canonical_integer_text(std::string_view text) {
  const bool negative = !text.empty() && text[0] == '-';
  std::string_view digits = negative ? text.substr(1) : text;
  if (digits.empty()) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  while (digits.size() > 1 && digits[0] == '0') digits.remove_prefix(1);
  std::string out(negative && digits != "0" ? "-" : "");
  out += digits;
  return out;
}

std::string integral_float_text(double value) {
  if (value == 0) return "0";
  return fmt::format("{:.0f}", value);  // exact: an integral double has no fraction to round
}

std::optional<int> compare_numbers(const Value& a, const Value& b) {
  if (a.is_float() && b.is_float()) {
    const double x = a.as_number();
    const double y = b.as_number();
    if (std::isnan(x) || std::isnan(y)) return std::nullopt;
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (!a.is_float() && !b.is_float()) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    return compare_integer_text(integer_text(a), integer_text(b));
  }
  // An int (of any size) against a float: exact, as Python compares them.
  const bool float_first = a.is_float();
  const double number = (float_first ? a : b).as_number();
  const std::string integer = integer_text(float_first ? b : a);
  int order = 0;  // the integer's order against the float
  if (std::isnan(number)) return std::nullopt;
  if (std::isinf(number)) {
    order = number > 0 ? -1 : 1;
  } else if (std::floor(number) == number) {
    order = compare_integer_text(integer, integral_float_text(number));
  } else {  // between floor(number) and floor(number) + 1: never equal
    order = compare_integer_text(integer, integral_float_text(std::floor(number))) <= 0 ? -1 : 1;
  }
  return float_first ? -order : order;
}

Value negate_big_int(const Value& value) {
  const std::string& text = value.big_int_text();
  if (text[0] == '-') return Value::big_integer(std::string_view(text).substr(1));
  std::string negated("-");
  negated += text;
  return Value::big_integer(negated);
}

Value abs_big_int(const Value& value) {
  const std::string& text = value.big_int_text();
  return text[0] == '-' ? Value::big_integer(std::string_view(text).substr(1)) : value;
}

bool big_int_is_even(const Value& value) { return (value.big_int_text().back() - '0') % 2 == 0; }

double big_int_to_double(const std::string& text) {
  const double number = std::strtod(text.c_str(), nullptr);  // correctly rounded
  if (std::isinf(number)) runtime_error("int too large to convert to float");
  return number;
}

}  // namespace tide::jinja
