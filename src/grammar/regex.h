// Regular expressions compiled to tide's grammar IR. The dialect is ECMAScript's (JSON Schema's `pattern`
// dialect, and what vLLM's `regex` structured output is written in), restricted to what a context-free
// grammar can express: literals and escapes, `.`, classes, groups, alternation and the quantifiers; anchors
// only where they are no-ops (at the ends of a top-level alternative). Backreferences, lookarounds, word
// boundaries, unicode property escapes and inline flags are refused with a GrammarError naming the feature.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace tide::grammar {

// Bounds against hostile patterns: the pattern's length, the nesting of groups, and the size of the
// expanded language description (a repeat counts its body max(min, max) times, nested repeats multiply).
inline constexpr size_t kMaxRegexLength = 64 * 1024;
inline constexpr int kMaxRegexDepth = 128;
inline constexpr int64_t kMaxRegexRepeat = 10000;   // the largest {m,n} bound accepted
inline constexpr int64_t kMaxRegexCost = 200000;    // expanded element count above which a pattern is refused

// A parsed regular expression over unicode code points.
struct RegexNode {
  enum class Kind { kChars, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kConcat;      // an empty kConcat is the empty string
  std::vector<CharRange> ranges;  // kChars: sorted, disjoint, non-adjacent code point ranges (may be empty)
  std::vector<RegexNode> children;
  int64_t min = 0, max = 0;       // kRepeat: bounds on the count of children[0]; max -1 = unbounded
};

// A pattern's top-level alternatives, and for each whether it was anchored by `^` / `$`. compile_regex
// ignores anchors (a grammar matches the whole text); JSON Schema's search semantics use them.
struct ParsedRegex {
  struct Branch {
    RegexNode node;
    bool anchored_start = false, anchored_end = false;
  };
  std::vector<Branch> branches;
};

ParsedRegex parse_regex(std::string_view pattern);

// How the characters a regex matches are written in the grammar's bytes: as UTF-8 (compile_regex), or as
// the content of a JSON string literal (a JSON Schema `pattern`): `"`, `\` and the controls escaped, each
// in one canonical spelling (\" \\ \b \f \n \r \t, else \u00xx), every other character as its UTF-8.
enum class RegexEncoding { kUtf8, kJsonString };

// Adds rules for `node` to `grammar` and returns an element (a literal, a class or a rule reference) that
// matches exactly its language. `name` prefixes the names of the added rules.
Element emit_regex(Grammar& grammar, const RegexNode& node, RegexEncoding encoding, const std::string& name);

// The pattern as a grammar whose root matches exactly the strings the pattern fully matches.
Grammar compile_regex(std::string_view pattern);

// Code point set helpers, shared with the JSON Schema compiler.
std::vector<CharRange> normalize_ranges(std::vector<CharRange> ranges);
std::vector<CharRange> complement_ranges(const std::vector<CharRange>& ranges);  // over all scalar values
std::string encode_utf8(uint32_t code_point);
std::vector<uint32_t> decode_utf8(std::string_view text);  // GrammarError on malformed UTF-8
// The canonical JSON string spelling of one code point (escaped as above when it must be).
std::string json_escape_code_point(uint32_t code_point);

}  // namespace tide::grammar
