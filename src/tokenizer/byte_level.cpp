#include "tokenizer/byte_level.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <memory>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace tide::byte_level {
namespace {

// GPT-2 maps printable Latin-1 bytes to themselves and the 68 others (controls, space, 0x7F-0xA0, 0xAD) to
// U+0100.. in byte order, so that every token is a printable string.
struct ByteTables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<int16_t, 0x144> char_to_byte{};  // -1: not a byte-level character
  std::array<std::string, 256> byte_to_utf8;

  ByteTables() {
    char_to_byte.fill(-1);
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next_extra++;
      byte_to_char[static_cast<size_t>(b)] = cp;
      char_to_byte[cp] = static_cast<int16_t>(b);
      utf8::append_code_point(cp, byte_to_utf8[static_cast<size_t>(b)]);
    }
  }
};

const ByteTables& tables() {
  static const ByteTables instance;
  return instance;
}

// \s of the HF regex engine (Oniguruma) is Unicode White_Space; PCRE2's \s differs slightly across versions
// (U+180E), so the class is spelled out.
#define TIDE_WS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" TIDE_WS "\\p{L}\\p{N}]+|[" TIDE_WS "]+(?![^" TIDE_WS
    "])|[" TIDE_WS "]+";
#undef TIDE_WS

std::string pcre2_message(int code) {
  std::array<PCRE2_UCHAR, 256> buffer{};
  pcre2_get_error_message(code, buffer.data(), buffer.size());
  return reinterpret_cast<const char*>(buffer.data());
}

// The compiled pattern is immutable and shared by all threads; match data is per thread.
pcre2_code* gpt2_regex() {
  static pcre2_code* const code = [] {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* compiled = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                                         PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (compiled == nullptr) fail("tokenizer: cannot compile the GPT-2 regex: {}", pcre2_message(error));
    pcre2_jit_compile(compiled, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
    return compiled;
  }();
  return code;
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

pcre2_match_data* thread_match_data() {
  thread_local std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(
      pcre2_match_data_create_from_pattern(gpt2_regex(), nullptr));
  return data.get();
}

}  // namespace

void encode_bytes(std::string_view text, std::string& out) {
  const ByteTables& t = tables();
  for (const char c : text) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
}

void decode_token(std::string_view token, std::string& out) {
  const ByteTables& t = tables();
  const size_t start = out.size();
  size_t pos = 0;
  while (pos < token.size()) {
    const char32_t cp = utf8::next_code_point(token, pos);
    if (cp >= t.char_to_byte.size() || t.char_to_byte[cp] < 0) {
      out.resize(start);
      out.append(token);
      return;
    }
    out.push_back(static_cast<char>(t.char_to_byte[cp]));
  }
}

void split_gpt2(std::string_view text, std::vector<std::string_view>& out) {
  pcre2_code* code = gpt2_regex();
  pcre2_match_data* match = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t last = 0;
  size_t offset = 0;
  while (offset < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("tokenizer: GPT-2 regex match failed: {}", pcre2_message(rc));
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(match);
    if (span[0] > last) out.push_back(text.substr(last, span[0] - last));
    if (span[1] == span[0]) {  // the pattern cannot match empty; guard against looping anyway
      utf8::next_code_point(text, offset);
      continue;
    }
    out.push_back(text.substr(span[0], span[1] - span[0]));
    last = offset = span[1];
  }
  if (last < text.size()) out.push_back(text.substr(last));
}

}  // namespace tide::byte_level
