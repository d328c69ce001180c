// compile_regex against std::regex (ECMAScript): the same full-match answer on random strings and on the
// grammar's own samples, for many patterns; unicode literals; refusals naming the feature; compile_choice.
#include <gtest/gtest.h>

#include "grammar/choice.h"
#include "grammar/regex.h"
#include "grammar_schema_test_util.h"

namespace tide::test {
namespace {

using grammar::compile_regex;
using grammar::GrammarError;

const std::vector<std::string> kPatterns = {
    "abc", "a|b|", "a*b+c?", "(ab)*", "(?:a|bc){2,3}", "[a-c]+x", "[^a-c]*", R"(\d{2,4})", R"(\w+@\w+\.com)",
    R"(\s*)", "a.c", R"([\d\s]+)", "x{3}", "x{2,}", "(a|b)*abb", "^a+$", "[-a]+", "[a-]+", R"(\.\*)", R"(\[\])",
    R"([\]]+)", R"(\x41\u0042)", "a??b", "a+?b*?", "((a|b)(c|d)){1,2}", R"([\w.-]+)", "[^\\n]+",
    R"(\D\W\S)", "(|a)b", "a{0}b", "a{1}", "(a*)*b", "[a-zA-Z_][a-zA-Z0-9_]{0,5}", R"(-?\d+(\.\d+)?)",
    "(cat|dog)s?", R"(\t\n?x)", "[.]", "[^]x", "a{2}?",
    "(a?)*b", "(a|)+", "(a*b*)*c", "(?:)*x", "(a{0,2})+b", "(a?b?)*", "(|a)*",
};

std::string alphabet_of(const std::string& pattern) {
  std::string alphabet = "abcdx ._-@\n0917AZ";
  for (char c : pattern) {
    if (alphabet.find(c) == std::string::npos) alphabet += c;
  }
  return alphabet;
}

TEST(GrammarRegex, AgreesWithStdRegexOnRandomStrings) {
  std::mt19937 rng(3);
  for (const std::string& pattern : kPatterns) {
    SCOPED_TRACE(pattern);
    const Grammar g = compile_regex(pattern);
    const std::regex re(pattern, std::regex::ECMAScript);
    const std::string alphabet = alphabet_of(pattern);
    int matched = 0;
    for (int i = 0; i < 1500; ++i) {
      std::string text;
      const int length = std::uniform_int_distribution<int>(0, 7)(rng);
      for (int k = 0; k < length; ++k) text += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
      const bool expected = std::regex_match(text, re);
      matched += expected;
      EXPECT_EQ(accepts(g, text), expected) << '"' << text << '"';
    }
    // The grammar's samples: std::regex (over bytes) must match the ASCII ones.
    Sampler sampler(g);
    for (int i = 0; i < 200; ++i) {
      const std::string text = sampler.sample(rng, 12);
      if (std::any_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; })) continue;
      matched += 1;
      EXPECT_TRUE(std::regex_match(text, re)) << '"' << text << '"';
    }
    EXPECT_GT(matched, 0);
  }
}

TEST(GrammarRegex, UnicodeLiteralsAndClasses) {
  const Grammar g = compile_regex("é+中[α-ω]{2}.[^a]");
  EXPECT_TRUE(accepts(g, "éé中αω😀€"));
  EXPECT_TRUE(accepts(g, "é中βγxy"));
  EXPECT_FALSE(accepts(g, "中αωxy"));
  EXPECT_FALSE(accepts(g, "é中αAxy"));
  EXPECT_FALSE(accepts(g, "é中αω\na"));  // '.' is no line terminator, [^a] no 'a'
  EXPECT_FALSE(accepts(g, "é中αωxa"));
  EXPECT_TRUE(accepts(compile_regex(R"(\u{1F600}\uD83D\uDE01)"), "😀😁"));
  EXPECT_TRUE(accepts(compile_regex(R"([^\s]+)"), "日本"));
  EXPECT_FALSE(accepts(compile_regex(R"(\s)"), "x"));
  EXPECT_TRUE(accepts(compile_regex(R"(\s)"), "\u3000"));
}

// What std::regex does not take: named groups, and braces that are no quantifier (literals, ECMAScript Annex B).
TEST(GrammarRegex, NamedGroupsAndLiteralBraces) {
  EXPECT_TRUE(accepts(compile_regex("(?<name>ab)+c"), "ababc"));
  EXPECT_FALSE(accepts(compile_regex("(?<name>ab)+c"), "c"));
  EXPECT_TRUE(accepts(compile_regex("a{,2}"), "a{,2}"));
  EXPECT_TRUE(accepts(compile_regex("b{2"), "b{2"));
  EXPECT_TRUE(accepts(compile_regex("]}"), "]}"));
  EXPECT_TRUE(accepts(compile_regex("x{1}{"), "x{"));
}

TEST(GrammarRegex, AnchorsOnlyAtTheEnds) {
  const grammar::ParsedRegex parsed = grammar::parse_regex("^ab|cd$|ef");
  ASSERT_EQ(parsed.branches.size(), 3u);
  EXPECT_TRUE(parsed.branches[0].anchored_start);
  EXPECT_FALSE(parsed.branches[0].anchored_end);
  EXPECT_TRUE(parsed.branches[1].anchored_end);
  EXPECT_FALSE(parsed.branches[2].anchored_start || parsed.branches[2].anchored_end);
  EXPECT_TRUE(accepts(compile_regex("^ab$"), "ab"));
}

void expect_refused(const std::string& pattern, const std::string& words) {
  try {
    compile_regex(pattern);
    ADD_FAILURE() << "accepted: " << pattern;
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << pattern << ": " << e.what();
  }
}

TEST(GrammarRegex, RefusesWhatAGrammarCannotSay) {
  expect_refused(R"((a)\1)", "backreference");
  expect_refused(R"((?<x>a)\k<x>)", "backreference");
  expect_refused("(?=a)a", "lookahead");
  expect_refused("(?!a)b", "lookahead");
  expect_refused("(?<=a)b", "lookbehind");
  expect_refused("(?<!a)b", "lookbehind");
  expect_refused(R"(\bword\b)", "word boundary");
  expect_refused("a^b", "'^'");
  expect_refused("a$b", "'$'");
  expect_refused("(a$)", "'$'");
  expect_refused("(?i)a", "inline flags");
  expect_refused(R"(\p{L})", "unicode property");
  expect_refused("[]", "empty character class");
  expect_refused("a**", "nothing to repeat");
  expect_refused("*a", "nothing to repeat");
  expect_refused("(a", "missing ')'");
  expect_refused("a)", "unmatched ')'");
  expect_refused("[z-a]", "out of order");
  expect_refused("x{3,2}", "out of order");
  expect_refused("[abc", "missing ']'");
  expect_refused(R"(\q)", "unknown escape");
  expect_refused("a{100001}", "repeat count");
  expect_refused("((a{100}){100}){100}", "expands");
  expect_refused("\xff", "UTF-8");
  expect_refused(std::string(70000, 'a'), "longer than");
  expect_refused(std::string(200, '(') + std::string(200, ')'), "nested too deeply");
}

TEST(GrammarChoice, ExactlyOneOfTheStrings) {
  const Grammar g = grammar::compile_choice({"yes", "no", "maybe so", "", "yes", "日本"});
  for (const char* text : {"yes", "no", "maybe so", "", "日本"}) EXPECT_TRUE(accepts(g, text)) << text;
  for (const char* text : {"ye", "yes ", "noyes", "maybe", "日"}) EXPECT_FALSE(accepts(g, text)) << text;
  EXPECT_EQ(g.rules[g.root].alternatives.size(), 5u);  // the repeated "yes" once
  EXPECT_THROW(grammar::compile_choice({}), GrammarError);
  std::mt19937 rng(1);
  Sampler sampler(g);
  for (int i = 0; i < 50; ++i) {
    const std::string s = sampler.sample(rng);
    EXPECT_TRUE(s == "yes" || s == "no" || s == "maybe so" || s.empty() || s == "日本") << s;
  }
}

}  // namespace
}  // namespace tide::test
