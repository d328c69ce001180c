// Python's "%s %d" % args for templates (str.__mod__ and the format filter); see jinja_ops.h.
#include <cmath>
#include <cstdio>
#include <limits>

#include "chat/jinja/jinja_builtins.h"
#include "chat/jinja/jinja_eval.h"
#include "chat/jinja/jinja_ops.h"
#include "chat/jinja/jinja_strings.h"

namespace tide::jinja {

namespace {


struct FormatSpec {
  bool left_align = false;
  bool zero_pad = false;
  char sign = 0;  // '+' or ' '
  int width = 0;
  int precision = -1;
  char conversion = 's';
};

std::string pad(std::string text, const FormatSpec& spec, bool numeric) {
  const size_t length = utf8_length(text);
  if (static_cast<size_t>(spec.width) <= length) return text;
  const size_t fill = spec.width - length;
  if (spec.left_align) return text + std::string(fill, ' ');
  if (spec.zero_pad && numeric) {
    const size_t sign = !text.empty() && (text[0] == '-' || text[0] == '+' || text[0] == ' ') ? 1 : 0;
    return text.substr(0, sign) + std::string(fill, '0') + text.substr(sign);
  }
  return std::string(fill, ' ') + text;
}

std::string format_number(const Value& arg, const FormatSpec& spec) {
  if (!arg.is_number()) {
    runtime_error("%{} format: a real number is required, not {}", spec.conversion, arg.type_name());
  }
  std::string text;
  const char c = spec.conversion;
  if (arg.is_big_int() && (c == 'd' || c == 'i')) {
    if (arg.big_int_text()[0] != '-' && spec.sign) text.push_back(spec.sign);
    text += arg.big_int_text();
  } else if (arg.is_big_int() && (c == 'x' || c == 'X' || c == 'o')) {
    runtime_error("%{} format of an int beyond 64 bits is not supported", c);
  } else if (c == 'd' || c == 'i' || c == 'x' || c == 'X' || c == 'o') {
    const int64_t value = arg.is_int() ? arg.as_int() : float_to_int(arg.as_number());
    const char* format = c == 'x' ? "%llx" : c == 'X' ? "%llX" : c == 'o' ? "%llo" : "%lld";
    const unsigned long long magnitude = value < 0 ? 0ULL - static_cast<unsigned long long>(value) : value;
    char buf[32];
    std::snprintf(buf, sizeof buf, format, magnitude);
    if (value < 0) {
      text.push_back('-');
    } else if (spec.sign) {
      text.push_back(spec.sign);
    }
    text += buf;
  } else {
    const int precision = spec.precision < 0 ? 6 : spec.precision;
    const std::string format = std::string("%") + (spec.sign ? std::string(1, spec.sign) : "") + ".*" + c;
    char buf[512];
    std::snprintf(buf, sizeof buf, format.c_str(), precision, arg.as_number());
    text = buf;
  }
  return pad(std::move(text), spec, true);
}

std::string format_one(const Value& arg, const FormatSpec& spec) {
  switch (spec.conversion) {
    case 's':
    case 'r': {
      std::string text = spec.conversion == 's' ? arg.str() : arg.repr();
      if (spec.precision >= 0) text = encode_utf8(decode_utf8(text).substr(0, spec.precision));
      return pad(std::move(text), spec, false);
    }
    case 'c': {
      if (arg.is_string() && utf8_length(arg.as_string()) == 1) return pad(arg.as_string(), spec, false);
      if (!arg.is_int() || arg.as_int() < 0 || arg.as_int() > 0x10FFFF) runtime_error("%c requires int or char");
      std::string text;
      append_utf8(text, static_cast<char32_t>(arg.as_int()));
      return pad(std::move(text), spec, false);
    }
    case 'd':
    case 'i':
    case 'x':
    case 'X':
    case 'o':
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G':
      return format_number(arg, spec);
    default:
      runtime_error("unsupported format character '{}'", spec.conversion);
  }
}

}  // namespace

std::string percent_format(const std::string& format, const std::vector<Value>& args) {
  std::string out;
  size_t next_arg = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) runtime_error("incomplete format");
    FormatSpec spec;
    for (; i < format.size() && std::string_view("-0+ #").find(format[i]) != std::string_view::npos; ++i) {
      if (format[i] == '-') spec.left_align = true;
      if (format[i] == '0') spec.zero_pad = true;
      if (format[i] == '+' || (format[i] == ' ' && spec.sign != '+')) spec.sign = format[i];
    }
    for (; i < format.size() && format[i] >= '0' && format[i] <= '9'; ++i)
      spec.width = std::min(spec.width * 10 + (format[i] - '0'), 1 << 20);
    if (i < format.size() && format[i] == '.') {
      spec.precision = 0;
      for (++i; i < format.size() && format[i] >= '0' && format[i] <= '9'; ++i)
        spec.precision = std::min(spec.precision * 10 + (format[i] - '0'), 400);
    }
    if (i >= format.size()) runtime_error("incomplete format");
    spec.conversion = format[i];
    if (spec.conversion == '%') {
      out.push_back('%');
      continue;
    }
    if (next_arg >= args.size()) runtime_error("not enough arguments for format string");
    out += format_one(args[next_arg++], spec);
  }
  if (next_arg < args.size()) runtime_error("not all arguments converted during string formatting");
  return out;
}

}  // namespace tide::jinja
