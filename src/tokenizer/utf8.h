// UTF-8 and Unicode-property helpers for the tokenizer: strict validation, code point iteration, Rust-style
// lossy decoding (String::from_utf8_lossy) that can also run incrementally for streaming, and the character
// classes HF tokenizers relies on (char::is_numeric, regex \s and \w).
// Non-goals: grapheme clusters, case mapping, normalization (see normalizer.h).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tide::utf8 {

inline constexpr size_t kValid = std::string_view::npos;
inline constexpr char32_t kReplacementChar = 0xFFFD;

// Byte offset of the first byte that does not start a well-formed UTF-8 sequence (overlong forms, surrogates
// and code points above U+10FFFF are ill-formed), or kValid.
size_t find_invalid(std::string_view bytes);

// Decodes the code point starting at s[pos] and moves pos past it. `s` must be valid UTF-8.
char32_t next_code_point(std::string_view s, size_t& pos);

// The code point that ends right before s[end] (end > 0). `s` must be valid UTF-8.
char32_t code_point_before(std::string_view s, size_t end);

void append_code_point(char32_t cp, std::string& out);

// Appends `bytes` decoded like Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one
// U+FFFD. When `final` is false, an incomplete sequence at the very end (one that more bytes could still
// complete) is left undecoded. Returns how many bytes were consumed, so that a caller feeding bytes in
// chunks gets exactly the text of a single call over all of them.
size_t append_lossy(std::string_view bytes, bool final, std::string& out);

// Rust char::is_numeric: general categories Nd, Nl, No.
bool is_numeric(char32_t cp);
// Unicode White_Space, which is what Rust regex and Oniguruma mean by \s.
bool is_white_space(char32_t cp);
// Rust regex \w (Unicode word character: Alphabetic, marks, Nd, Pc, joiners), from general categories.
bool is_word_char(char32_t cp);

}  // namespace tide::utf8
