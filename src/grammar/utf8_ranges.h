// Unicode character classes as UTF-8 byte-range sequences, the way regex engines compile them: a class becomes
// a few sequences of 1-4 byte ranges such that a byte string matches one sequence exactly when it is the
// UTF-8 encoding of a code point in the class. Surrogates (U+D800-U+DFFF) are never in a class.
#pragma once

#include <cstdint>
#include <vector>

#include "grammar/grammar.h"

namespace tide::grammar::detail {

struct ByteRange {
  uint8_t lo = 0, hi = 0;
};
using ByteRangeSeq = std::vector<ByteRange>;

// The code points of a class (ranges, or their complement when negated) sorted, merged and without
// surrogates.
std::vector<CharRange> normalize_class(const std::vector<CharRange>& ranges, bool negated);

// The byte-range sequences of normalized ranges, in increasing code point order.
std::vector<ByteRangeSeq> utf8_sequences(const std::vector<CharRange>& normalized);

}  // namespace tide::grammar::detail
