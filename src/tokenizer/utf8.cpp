#include "tokenizer/utf8.h"

#include <utf8proc.h>

#include <cstdint>

#include "core/utf8_encode.h"

namespace tide::utf8 {
namespace {

enum class SeqKind { kComplete, kInvalid, kTruncated };

struct Seq {
  SeqKind kind;
  size_t length;  // bytes of the character, of the maximal invalid subpart, or of the truncated prefix
};

// Classifies the sequence at s[i] with the well-formedness table of the Unicode standard (Table 3-7). The
// invalid case stops at the first byte that cannot continue the sequence, which gives the "maximal subpart"
// that Rust (and the WHATWG decoder) replace by one U+FFFD.
Seq classify(std::string_view s, size_t i) {
  const auto b = static_cast<uint8_t>(s[i]);
  if (b < 0x80) return {SeqKind::kComplete, 1};
  size_t need = 0;
  uint8_t lo = 0x80;
  uint8_t hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b == 0xE0) {
    need = 2, lo = 0xA0;
  } else if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) {
    need = 2;
  } else if (b == 0xED) {
    need = 2, hi = 0x9F;  // excludes UTF-16 surrogates
  } else if (b == 0xF0) {
    need = 3, lo = 0x90;
  } else if (b >= 0xF1 && b <= 0xF3) {
    need = 3;
  } else if (b == 0xF4) {
    need = 3, hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {SeqKind::kInvalid, 1};
  }
  for (size_t k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return {SeqKind::kTruncated, k};
    const auto c = static_cast<uint8_t>(s[i + k]);
    if (c < lo || c > hi) return {SeqKind::kInvalid, k};
    lo = 0x80, hi = 0xBF;
  }
  return {SeqKind::kComplete, need + 1};
}

}  // namespace

size_t find_invalid(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const Seq seq = classify(bytes, i);
    if (seq.kind != SeqKind::kComplete) return i;
    i += seq.length;
  }
  return kValid;
}

char32_t next_code_point(std::string_view s, size_t& pos) {
  const auto b = static_cast<uint8_t>(s[pos]);
  if (b < 0x80) {
    ++pos;
    return b;
  }
  const size_t length = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  char32_t cp = b & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[pos + k]) & 0x3F);
  pos += length;
  return cp;
}

char32_t code_point_before(std::string_view s, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
  return next_code_point(s, start);
}

void append_code_point(char32_t cp, std::string& out) { append_utf8_code_point(cp, out); }

size_t append_lossy(std::string_view bytes, bool final, std::string& out) {
  size_t i = 0;
  while (i < bytes.size()) {
    const Seq seq = classify(bytes, i);
    if (seq.kind == SeqKind::kComplete) {
      out.append(bytes.substr(i, seq.length));
    } else if (seq.kind == SeqKind::kTruncated && !final) {
      return i;  // the next bytes may complete it
    } else {
      append_code_point(kReplacementChar, out);
    }
    i += seq.length;
  }
  return i;
}

bool is_numeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return category == UTF8PROC_CATEGORY_ND || category == UTF8PROC_CATEGORY_NL ||
         category == UTF8PROC_CATEGORY_NO;
}

bool is_white_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_word_char(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') || cp == '_';
  }
  if (cp == 0x200C || cp == 0x200D) return true;  // Join_Control
  // Other_Alphabetic symbols (circled / squared letters) are category So but still \w.
  if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) || (cp >= 0x1F150 && cp <= 0x1F169) ||
      (cp >= 0x1F170 && cp <= 0x1F189)) {
    return true;
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

}  // namespace tide::utf8
