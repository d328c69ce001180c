// tide::grammar: the intermediate representation of tide's structured-output engine. Every constraint (GBNF
// grammars, JSON Schema, regex, choice) compiles to a Grammar: a context-free grammar over UTF-8 text whose
// terminals are literal byte strings and Unicode character classes. The matcher (matcher.h) compiles it
// further to bytes and computes per-step token masks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/error.h"

namespace tide::grammar {

// What a grammar (or schema, regex, ...) the engine refuses throws: syntax errors, left recursion, grammars too
// large or too ambiguous to match in bounded memory.
class GrammarError : public tide::Error {
 public:
  using Error::Error;
};

// Bounds that keep hostile input from exhausting memory or time.
inline constexpr size_t kMaxRules = 200'000;
inline constexpr size_t kMaxElements = 2'000'000;   // elements summed over every alternative of every rule
inline constexpr int64_t kMaxRepeat = 100'000;      // largest finite bound of one repetition {m,n}

struct CharRange {
  uint32_t lo = 0, hi = 0;  // Unicode code points, inclusive
};

struct Element {
  enum class Kind { kLiteral, kCharClass, kRule };
  Kind kind = Kind::kLiteral;
  std::string bytes;              // kLiteral: UTF-8 bytes to match exactly (non-empty)
  std::vector<CharRange> ranges;  // kCharClass: one code point in the ranges (negated: any Unicode scalar value,
  bool negated = false;           //   surrogates excluded, outside them)
  int32_t rule = -1;              // kRule: index into Grammar::rules
};

using Sequence = std::vector<Element>;  // an empty sequence matches the empty string

struct Rule {
  std::string name;
  std::vector<Sequence> alternatives;
};

// A context-free grammar over UTF-8 text: the language of rule `root`.
class Grammar {
 public:
  // Adds a rule with no alternatives yet and returns its index; the name is made unique ("x", "x_1", ...).
  int32_t add_rule(std::string name);
  void add_alternative(int32_t rule, Sequence seq);

  // Helpers that add auxiliary rules. repeat: `e` repeated [min, max] times (max = -1: unbounded); bounded
  // repetition expands to max - min nested optional rules, so max is limited by kMaxRepeat (GrammarError).
  Element repeat(Element e, int64_t min, int64_t max);
  Element optional(Element e) { return repeat(std::move(e), 0, 1); }
  Element star(Element e) { return repeat(std::move(e), 0, -1); }
  Element plus(Element e) { return repeat(std::move(e), 1, -1); }
  // A rule whose alternatives are `alternatives` (for grouping), referenced by the returned element.
  Element group(std::vector<Sequence> alternatives, std::string name = "group");

  static Element literal(std::string bytes);
  static Element char_class(std::vector<CharRange> ranges, bool negated = false);
  static Element ref(int32_t rule);

  std::vector<Rule> rules;
  int32_t root = -1;

  // Throws GrammarError (naming the rule) unless: root is set; every referenced rule exists and has an
  // alternative; literals are non-empty and char class ranges valid (lo <= hi <= 0x10FFFF); there is no left
  // recursion, direct or indirect, also through nullable prefixes; the size is within kMaxRules/kMaxElements.
  void validate() const;

  // GBNF text of the grammar (root first), for debugging and tests; parse_gbnf reads it back.
  std::string to_gbnf() const;

  // Number of elements over every alternative of every rule.
  size_t element_count() const;

 private:
  size_t elements_added_ = 0;  // through add_alternative, to refuse hostile sizes before memory runs out
  std::unordered_set<std::string> names_;                  // names given by add_rule
  std::unordered_map<std::string, size_t> next_suffix_;    // per taken stem: the last suffix tried
};

// Parses llama.cpp's GBNF: `name ::= alternatives` rules, `|`, `( )`, `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`,
// "string" literals with escapes \n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH (also \[ \] \- \/ \'), character classes
// [a-z0-9_] and [^...], `.` (any character), `#` comments to the end of the line; the start rule is `root`.
// Errors (GrammarError) name the line and column. The result is validated.
Grammar parse_gbnf(std::string_view text);

}  // namespace tide::grammar
