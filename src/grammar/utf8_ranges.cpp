#include "grammar/utf8_ranges.h"

#include <algorithm>

namespace tide::grammar::detail {

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

int encoded_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void encode(uint32_t cp, uint8_t* out) {
  switch (encoded_length(cp)) {
    case 1: out[0] = static_cast<uint8_t>(cp); break;
    case 2:
      out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
      out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    case 3:
      out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
      out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
    default:
      out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
      out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
      out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      break;
  }
}

// [lo, hi] of one encoded length. When lo and hi differ above their low 6k bits, the range is cut so that
// every piece's trailing bytes cover either one value or the full continuation range 80-BF: then the
// byte-wise ranges of lo's and hi's encodings describe the piece exactly.
void split_same_length(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>& out) {
  const int n = encoded_length(lo);
  for (int k = 1; k < n; ++k) {
    const uint32_t low_mask = (1u << (6 * k)) - 1;
    if ((lo & ~low_mask) == (hi & ~low_mask)) continue;
    if ((lo & low_mask) != 0) {
      split_same_length(lo, lo | low_mask, out);
      split_same_length((lo | low_mask) + 1, hi, out);
      return;
    }
    if ((hi & low_mask) != low_mask) {
      split_same_length(lo, (hi & ~low_mask) - 1, out);
      split_same_length(hi & ~low_mask, hi, out);
      return;
    }
  }
  uint8_t a[4], b[4];
  encode(lo, a);
  encode(hi, b);
  ByteRangeSeq seq(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) seq[static_cast<size_t>(i)] = {a[i], b[i]};
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<CharRange> normalize_class(const std::vector<CharRange>& ranges, bool negated) {
  std::vector<CharRange> sorted;
  for (const CharRange& r : ranges) {
    if (r.lo <= r.hi && r.lo <= kMaxCodePoint) sorted.push_back({r.lo, std::min(r.hi, kMaxCodePoint)});
  }
  std::sort(sorted.begin(), sorted.end(), [](const CharRange& a, const CharRange& b) { return a.lo < b.lo; });
  std::vector<CharRange> merged;
  for (const CharRange& r : sorted) {
    if (!merged.empty() && r.lo <= merged.back().hi + 1) {
      merged.back().hi = std::max(merged.back().hi, r.hi);
    } else {
      merged.push_back(r);
    }
  }
  if (negated) {
    std::vector<CharRange> complement;
    uint32_t next = 0;
    for (const CharRange& r : merged) {
      if (r.lo > next) complement.push_back({next, r.lo - 1});
      next = r.hi + 1;
    }
    if (next <= kMaxCodePoint) complement.push_back({next, kMaxCodePoint});
    merged = std::move(complement);
  }
  std::vector<CharRange> out;  // without surrogates
  for (const CharRange& r : merged) {
    if (r.hi < 0xD800 || r.lo > 0xDFFF) {
      out.push_back(r);
      continue;
    }
    if (r.lo < 0xD800) out.push_back({r.lo, 0xD7FF});
    if (r.hi > 0xDFFF) out.push_back({0xE000, r.hi});
  }
  return out;
}

std::vector<ByteRangeSeq> utf8_sequences(const std::vector<CharRange>& normalized) {
  static constexpr uint32_t kLengthEnds[] = {0x7F, 0x7FF, 0xFFFF, kMaxCodePoint};
  std::vector<ByteRangeSeq> out;
  for (const CharRange& r : normalized) {
    uint32_t lo = r.lo;
    for (const uint32_t end : kLengthEnds) {
      if (lo > r.hi) break;
      if (lo > end) continue;
      const uint32_t hi = std::min(r.hi, end);
      split_same_length(lo, hi, out);
      lo = hi + 1;
    }
  }
  return out;
}

}  // namespace tide::grammar::detail
