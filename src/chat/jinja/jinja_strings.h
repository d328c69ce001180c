// Python's str semantics over UTF-8 std::string, as jinja2 templates see strings: code-point length and
// slicing, str.strip's whitespace set, case mapping, splitlines, split, repr quoting and float repr.
// Bytes that are not valid UTF-8 decode to one code point each (U+DC80 + byte, like Python's surrogateescape)
// and encode back to the same byte, so text passes through unchanged.
// Non-goals: full Unicode case mappings that change length (Python's 'ß'.upper() == 'SS'; here 'ß' stays),
// normalization, locale-aware anything.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tide::jinja {

std::u32string decode_utf8(std::string_view text);
std::string encode_utf8(std::u32string_view text);
void append_utf8(std::string& out, char32_t cp);
// The code point at byte `pos` (which must be < text.size()); `length` receives its byte count.
char32_t decode_one(std::string_view text, size_t pos, size_t& length);
// Python's rstrip() / the regex \s* of jinja2's lexer: the first byte at or after `pos` that is not whitespace.
size_t skip_py_space(std::string_view text, size_t pos);
// Number of code points (Python's len()).
size_t utf8_length(std::string_view text);

// Python str.isspace() for one code point.
bool is_py_space(char32_t cp);

// str.strip / lstrip / rstrip: `chars` (nullopt: whitespace) removed from the chosen ends.
std::string py_strip(std::string_view text, const std::optional<std::string>& chars, bool left, bool right);
std::string py_upper(std::string_view text);
std::string py_lower(std::string_view text);
// str.capitalize(): first code point upper case (title case), the rest lower case.
std::string py_capitalize(std::string_view text);
// str.title(): a cased letter after an uncased character starts a word.
std::string py_title(std::string_view text);
// str.splitlines() (\n, \r, \r\n, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029), without the line ends.
std::vector<std::string> py_splitlines(std::string_view text);
// str.split(sep, maxsplit): sep nullopt splits on runs of whitespace and drops empty ends.
std::vector<std::string> py_split(std::string_view text, const std::optional<std::string>& sep, int64_t maxsplit);
// str.replace(old, new, count); count < 0 replaces all. An empty `old` inserts between code points.
std::string py_replace(std::string_view text, std::string_view old_text, std::string_view new_text, int64_t count);

// repr() of a str: single quotes unless the text holds ' and no ", escapes for \\, the quote, \t \n \r and
// non-printable code points.
std::string py_repr_string(std::string_view text);
// repr() of a float: shortest round-trip digits, exponent form below 1e-4 and from 1e16 on ("1e-05",
// "1e+16", "1.5", "2.0", "inf", "nan").
std::string py_float_repr(double value);

}  // namespace tide::jinja
