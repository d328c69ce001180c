// Python's str.format for templates ('{:.2f}'.format(x), '{name}'.format(name=...)); see jinja_ops.h.
#include <charconv>
#include <cmath>
#include <cstdio>

#include "chat/jinja/jinja_eval.h"
#include "chat/jinja/jinja_ops.h"
#include "chat/jinja/jinja_strings.h"

namespace tide::jinja {

namespace {

struct Spec {
  std::string fill = " ";
  char align = 0;  // '<', '>', '^', '=' or 0 (by type)
  char sign = '-';
  bool zero = false;
  int64_t width = 0;
  char grouping = 0;
  int precision = -1;
  char type = 0;
};

Spec parse_spec(const std::string& text) {
  const std::u32string cps = decode_utf8(text);
  Spec spec;
  size_t i = 0;
  const auto is_align = [](char32_t c) { return c == U'<' || c == U'>' || c == U'^' || c == U'='; };
  if (cps.size() >= 2 && is_align(cps[1])) {
    spec.fill.clear();
    append_utf8(spec.fill, cps[0]);
    spec.align = static_cast<char>(cps[1]);
    i = 2;
  } else if (!cps.empty() && is_align(cps[0])) {
    spec.align = static_cast<char>(cps[0]);
    i = 1;
  }
  if (i < cps.size() && (cps[i] == U'+' || cps[i] == U'-' || cps[i] == U' ')) spec.sign = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == U'0') spec.zero = true, ++i;
  for (; i < cps.size() && cps[i] >= U'0' && cps[i] <= U'9'; ++i)
    spec.width = std::min<int64_t>(spec.width * 10 + (cps[i] - U'0'), 1 << 20);
  if (i < cps.size() && (cps[i] == U',' || cps[i] == U'_')) spec.grouping = static_cast<char>(cps[i++]);
  if (i < cps.size() && cps[i] == U'.') {
    spec.precision = 0;
    for (++i; i < cps.size() && cps[i] >= U'0' && cps[i] <= U'9'; ++i)
      spec.precision = std::min(spec.precision * 10 + static_cast<int>(cps[i] - U'0'), 300);
  }
  if (i < cps.size()) spec.type = static_cast<char>(cps[i++]);
  if (i != cps.size()) runtime_error("Invalid format specifier '{}'", text);
  return spec;
}

std::string group_digits(std::string digits, char separator) {
  if (!separator) return digits;
  const size_t point = std::min(digits.find('.'), digits.size());
  for (size_t k = point; k > 3; k -= 3) digits.insert(k - 3, 1, separator);
  return digits;
}

std::string format_float(double value, const Spec& spec) {
  char type = spec.type;
  int precision = spec.precision < 0 ? 6 : spec.precision;
  if (type == 0) {
    if (spec.precision < 0) return py_float_repr(std::fabs(value));
    type = 'g';
  }
  if (type == '%') value *= 100;
  char buf[512];
  const char conversion = type == '%' ? 'f' : type;
  const char format[] = {'%', '.', '*', conversion, 0};
  std::snprintf(buf, sizeof buf, format, precision, std::fabs(value));
  std::string text = buf;
  if (type == '%') text += "%";
  return text;
}

std::string format_number(const Value& value, const Spec& spec) {
  std::string body;
  bool negative = false;
  const bool integral = value.is_int() && spec.type != 'f' && spec.type != 'e' && spec.type != 'g' &&
                        spec.type != '%' && spec.type != 'F' && spec.type != 'E' && spec.type != 'G';
  if (value.is_big_int() && (spec.type == 0 || spec.type == 'd' || spec.type == 'n')) {
    const std::string& text = value.big_int_text();
    negative = text[0] == '-';
    body = negative ? text.substr(1) : text;
  } else if (value.is_big_int() && spec.type != 0 && std::string_view("xXob").find(spec.type) != std::string_view::npos) {
    runtime_error("format code '{}' of an int beyond 64 bits is not supported", spec.type);
  } else if (integral) {
    const int64_t number = value.as_int();
    negative = number < 0;
    const unsigned long long magnitude = negative ? 0ULL - static_cast<unsigned long long>(number) : number;
    switch (spec.type) {
      case 0:
      case 'd':
      case 'n':
        body = std::to_string(magnitude);
        break;
      case 'x':
        body = fmt::format("{:x}", magnitude);
        break;
      case 'X':
        body = fmt::format("{:X}", magnitude);
        break;
      case 'o':
        body = fmt::format("{:o}", magnitude);
        break;
      case 'b':
        body = fmt::format("{:b}", magnitude);
        break;
      default:
        runtime_error("Unknown format code '{}' for object of type 'int'", spec.type);
    }
  } else {
    if (value.is_float() && std::string_view("dxXob").find(spec.type) != std::string_view::npos && spec.type) {
      runtime_error("Unknown format code '{}' for object of type 'float'", spec.type);
    }
    const double number = value.as_number();
    negative = std::signbit(number) && !std::isnan(number);
    body = format_float(number, spec);
  }
  body = group_digits(std::move(body), spec.grouping);
  const std::string sign = negative ? "-" : spec.sign == '+' ? "+" : spec.sign == ' ' ? " " : "";
  const int64_t length = static_cast<int64_t>(sign.size() + body.size());
  if (spec.zero && !spec.align && spec.width > length) return sign + std::string(spec.width - length, '0') + body;
  if (spec.align == '=' && spec.width > length) {
    std::string pad;
    for (int64_t i = length; i < spec.width; ++i) pad += spec.fill;
    return sign + pad + body;
  }
  return sign + body;
}

std::string apply_width(std::string text, const Spec& spec, char default_align) {
  const auto length = static_cast<int64_t>(utf8_length(text));
  if (spec.width <= length || spec.align == '=') return text;
  const int64_t margin = spec.width - length;
  const char align = spec.align ? spec.align : default_align;
  const int64_t left = align == '<' ? 0 : align == '>' ? margin : margin / 2;
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += spec.fill;
  out += text;
  for (int64_t i = left; i < margin; ++i) out += spec.fill;
  return out;
}

std::string format_value(const Value& value, const std::string& spec_text) {
  if (spec_text.empty()) return value.str();
  const Spec spec = parse_spec(spec_text);
  if (value.is_number() && !(value.is_bool() && spec.type == 's')) {
    return apply_width(format_number(value, spec), spec, '>');
  }
  if (!value.is_string()) runtime_error("unsupported format string passed to {}.__format__", value.type_name());
  if (spec.type != 0 && spec.type != 's') runtime_error("Unknown format code '{}' for object of type 'str'", spec.type);
  std::string text = value.as_string();
  if (spec.precision >= 0) text = encode_utf8(decode_utf8(text).substr(0, spec.precision));
  return apply_width(std::move(text), spec, '<');
}

// A field name's index ("0", the "3" of "[3]"), all decimal digits. Python's integers have no bound; beyond
// int64 the index cannot exist, which is an error as Python's IndexError would be (not std::stoul's exception).
int64_t field_index(const std::string& digits) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) runtime_error("format index {} out of range", digits);
  return value;
}

// The value a field name ("0", "name", "0.attr", "name[key]") refers to.
Value lookup_field(const std::string& field, const CallArgs& args, size_t& auto_index) {
  size_t end = field.find_first_of(".[");
  const std::string head = field.substr(0, end);
  Value value;
  if (head.empty() || std::all_of(head.begin(), head.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    const size_t index = head.empty() ? auto_index++ : static_cast<size_t>(field_index(head));
    if (index >= args.positional.size())
      runtime_error("Replacement index {} out of range for positional args tuple", index);
    value = args.positional[index];
  } else {
    const auto it =
        std::find_if(args.keyword.begin(), args.keyword.end(), [&](const auto& kv) { return kv.first == head; });
    if (it == args.keyword.end()) runtime_error("KeyError: '{}'", head);
    value = it->second;
  }
  while (end < field.size()) {
    if (field[end] == '.') {
      const size_t next = std::min(field.find_first_of(".[", end + 1), field.size());
      value = get_attribute(value, field.substr(end + 1, next - end - 1));
      end = next;
    } else {
      const size_t close = field.find(']', end);
      if (close == std::string::npos) runtime_error("Missing ']' in format string");
      const std::string key = field.substr(end + 1, close - end - 1);
      const bool digits =
          !key.empty() && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
      value = get_item(value, digits ? Value::integer(field_index(key)) : Value::string(key));
      end = close + 1;
    }
  }
  return value;
}

}  // namespace

std::string python_format(Evaluator& evaluator, const std::string& format, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 >= format.size() || format[i + 1] != '}') runtime_error("Single '}}' encountered in format string");
      out.push_back('}');
      ++i;
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = format.find('}', i);
    if (close == std::string::npos) runtime_error("Single '{{' encountered in format string");
    std::string field = format.substr(i + 1, close - i - 1);
    std::string spec;
    if (const size_t colon = field.find(':'); colon != std::string::npos)
      spec = field.substr(colon + 1), field.resize(colon);
    char conversion = 0;
    if (const size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 0;
      field.resize(bang);
    }
    Value value = lookup_field(field, args, auto_index);
    if (conversion == 'r') value = Value::string(value.repr());
    if (conversion == 's') value = Value::string(value.str());
    out += format_value(value, spec);
    evaluator.check_size(out.size());
    i = close;
  }
  return out;
}

}  // namespace tide::jinja
