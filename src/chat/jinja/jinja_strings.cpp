// Python str semantics over UTF-8 (see jinja_strings.h).
#include "chat/jinja/jinja_strings.h"

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "core/utf8_encode.h"

namespace tide::jinja {

namespace {

constexpr char32_t kEscapedByteBase = 0xDC80;  // invalid byte b decodes to U+DC80 + (b - 0x80) (b >= 0x80)

// Length of the valid UTF-8 sequence starting at text[i], or 0 when it is not one.
size_t valid_sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t length = 0;
  char32_t min_cp = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, min_cp = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, min_cp = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, min_cp = 0x10000;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  char32_t cp = lead & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return length;
}

bool is_cased(char32_t cp) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL || category == UTF8PROC_CATEGORY_LT;
}

bool is_printable(char32_t cp) {
  if (cp == U' ') return true;
  if (cp >= kEscapedByteBase && cp <= kEscapedByteBase + 0x7F) return false;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

char32_t to_upper(char32_t cp) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp))); }
char32_t to_lower(char32_t cp) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))); }
char32_t to_title(char32_t cp) { return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp))); }

template <typename Map>
std::string map_code_points(std::string_view text, Map map) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : decode_utf8(text)) append_utf8(out, map(cp));
  return out;
}

bool is_line_break(char32_t cp) {
  return cp == U'\n' || cp == U'\r' || cp == U'\v' || cp == U'\f' || (cp >= 0x1C && cp <= 0x1E) || cp == 0x85 ||
         cp == 0x2028 || cp == 0x2029;
}

}  // namespace

// --- UTF-8 ---

char32_t decode_one(std::string_view text, size_t pos, size_t& length) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  length = 1;
  if (lead < 0x80) return lead;
  const size_t sequence_length = valid_sequence_length(text, pos);
  if (sequence_length == 0) return kEscapedByteBase + (lead - 0x80);
  char32_t cp = lead & (0x7F >> sequence_length);
  for (size_t k = 1; k < sequence_length; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[pos + k]) & 0x3F);
  length = sequence_length;
  return cp;
}

size_t skip_py_space(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    size_t length = 0;
    if (!is_py_space(decode_one(text, pos, length))) break;
    pos += length;
  }
  return pos;
}

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t i = 0, length = 0; i < text.size(); i += length) out.push_back(decode_one(text, i, length));
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp >= kEscapedByteBase && cp <= kEscapedByteBase + 0x7F) {
    out.push_back(static_cast<char>(0x80 + (cp - kEscapedByteBase)));
  } else {
    append_utf8_code_point(cp, out);
  }
}

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text) append_utf8(out, cp);
  return out;
}

size_t utf8_length(std::string_view text) {
  size_t count = 0;
  for (size_t i = 0; i < text.size(); ++count) {
    const size_t length = static_cast<unsigned char>(text[i]) < 0x80 ? 1 : valid_sequence_length(text, i);
    i += length == 0 ? 1 : length;
  }
  return count;
}

// --- Python str methods ---

bool is_py_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

std::string py_strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string cps = decode_utf8(text);
  const std::u32string strip_set = chars ? decode_utf8(*chars) : std::u32string();
  const auto strips = [&](char32_t cp) { return chars ? strip_set.find(cp) != std::u32string::npos : is_py_space(cp); };
  size_t begin = 0;
  size_t end = cps.size();
  while (left && begin < end && strips(cps[begin])) ++begin;
  while (right && end > begin && strips(cps[end - 1])) --end;
  return encode_utf8(std::u32string_view(cps).substr(begin, end - begin));
}

std::string py_upper(std::string_view text) { return map_code_points(text, to_upper); }
std::string py_lower(std::string_view text) { return map_code_points(text, to_lower); }

std::string py_capitalize(std::string_view text) {
  bool first = true;
  return map_code_points(text, [&](char32_t cp) {
    const char32_t mapped = first ? to_title(cp) : to_lower(cp);
    first = false;
    return mapped;
  });
}

std::string py_title(std::string_view text) {
  bool previous_cased = false;
  return map_code_points(text, [&](char32_t cp) {
    const char32_t mapped = previous_cased ? to_lower(cp) : to_title(cp);
    previous_cased = is_cased(cp);
    return mapped;
  });
}

std::vector<std::string> py_splitlines(std::string_view text) {
  const std::u32string cps = decode_utf8(text);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!is_line_break(cps[i])) continue;
    lines.push_back(encode_utf8(std::u32string_view(cps).substr(start, i - start)));
    if (cps[i] == U'\r' && i + 1 < cps.size() && cps[i + 1] == U'\n') ++i;
    start = i + 1;
  }
  if (start < cps.size()) lines.push_back(encode_utf8(std::u32string_view(cps).substr(start)));
  return lines;
}

std::vector<std::string> py_split(std::string_view text, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) fail("empty separator");
    size_t start = 0;
    for (size_t found; (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) &&
                       (found = text.find(*sep, start)) != std::string_view::npos;) {
      parts.emplace_back(text.substr(start, found - start));
      start = found + sep->size();
    }
    parts.emplace_back(text.substr(start));
    return parts;
  }
  const std::u32string cps = decode_utf8(text);
  size_t i = 0;
  const auto skip_space = [&] {
    while (i < cps.size() && is_py_space(cps[i])) ++i;
  };
  for (skip_space(); i < cps.size(); skip_space()) {
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
      parts.push_back(encode_utf8(std::u32string_view(cps).substr(i)));
      break;
    }
    const size_t start = i;
    while (i < cps.size() && !is_py_space(cps[i])) ++i;
    parts.push_back(encode_utf8(std::u32string_view(cps).substr(start, i - start)));
  }
  return parts;
}

std::string py_replace(std::string_view text, std::string_view old_text, std::string_view new_text, int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old_text.empty()) {
    const std::u32string cps = decode_utf8(text);
    for (char32_t cp : cps) {
      if (count < 0 || done < count) out.append(new_text), ++done;
      append_utf8(out, cp);
    }
    if (count < 0 || done < count) out.append(new_text);
    return out;
  }
  size_t start = 0;
  for (size_t found; (count < 0 || done < count) && (found = text.find(old_text, start)) != std::string_view::npos;
       ++done) {
    out.append(text.substr(start, found - start)).append(new_text);
    start = found + old_text.size();
  }
  out.append(text.substr(start));
  return out;
}

// --- repr ---

std::string py_repr_string(std::string_view text) {
  const bool has_single = text.find('\'') != std::string_view::npos;
  const bool has_double = text.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : decode_utf8(text)) {
    if (cp == static_cast<char32_t>(quote) || cp == U'\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == U'\t') {
      out += "\\t";
    } else if (cp == U'\n') {
      out += "\\n";
    } else if (cp == U'\r') {
      out += "\\r";
    } else if (cp < 0x80 && cp >= 0x20 && cp != 0x7F) {
      out.push_back(static_cast<char>(cp));
    } else if (is_printable(cp)) {
      append_utf8(out, cp);
    } else {
      char buf[16];
      if (cp < 0x100) {
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      } else if (cp < 0x10000) {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      } else {
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
      }
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

std::string py_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(result.ptr - buf));  // "-d.ddde+XX"
  const size_t e_pos = sci.find('e');
  const std::string sign = sci[0] == '-' ? "-" : "";
  std::string digits;
  for (char c : sci.substr(sign.size(), e_pos - sign.size())) {
    if (c != '.') digits.push_back(c);
  }
  const int exponent = std::stoi(std::string(sci.substr(e_pos + 1)));
  const int decimal_point = exponent + 1;  // digits before the decimal point
  const int num_digits = static_cast<int>(digits.size());
  std::string out = sign;
  if (decimal_point > -4 && decimal_point <= 16) {
    if (decimal_point <= 0) return out.append("0.").append(-decimal_point, '0').append(digits);
    if (decimal_point >= num_digits) return out.append(digits).append(decimal_point - num_digits, '0').append(".0");
    return out.append(digits, 0, decimal_point).append(".").append(digits, decimal_point);
  }
  out.append(digits, 0, 1);
  if (num_digits > 1) out.append(".").append(digits, 1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', exponent < 0 ? -exponent : exponent);
  return out + exp_buf;
}

}  // namespace tide::jinja
