// parse_gbnf: syntax, escapes, repetition, errors with line and column, hostile input; the IR's validation.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

#include "grammar/grammar.h"
#include "grammar_test_util.h"

namespace tide::grammar {
namespace {

using test::matches;

std::string error_of(const std::string& gbnf) {
  try {
    parse_gbnf(gbnf);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "";
}

TEST(GrammarGbnf, ParsesRulesAlternativesAndGroups) {
  const Grammar g = parse_gbnf(R"(
# a comment
root ::= greeting " " name   # trailing comment
greeting ::= "hello" | "hi"
name ::= ( [A-Z] [a-z]* )
)");
  ASSERT_GE(g.rules.size(), 3u);
  EXPECT_EQ(g.rules[static_cast<size_t>(g.root)].name, "root");
  EXPECT_TRUE(matches(g.to_gbnf(), "hello World"));
  const std::string gbnf = "root ::= (\"a\" | \"b\")+ \"c\"";
  EXPECT_TRUE(matches(gbnf, "abac"));
  EXPECT_FALSE(matches(gbnf, "c"));
}

TEST(GrammarGbnf, AlternativesContinueOnLinesStartingWithBar) {
  const std::string gbnf = "root ::= \"a\"\n     | \"b\"\n\n  | \"c\"\nother ::= \"x\"\n";
  EXPECT_TRUE(matches(gbnf, "a"));
  EXPECT_TRUE(matches(gbnf, "c"));
  EXPECT_FALSE(matches(gbnf, "x"));
}

TEST(GrammarGbnf, MultiLineGroups) {
  const std::string gbnf = "root ::= (\n  \"a\" # first\n  | \"b\"\n)\n";
  EXPECT_TRUE(matches(gbnf, "b"));
}

TEST(GrammarGbnf, Escapes) {
  EXPECT_TRUE(matches(R"(root ::= "\n\t\r\\\"")", "\n\t\r\\\""));
  EXPECT_TRUE(matches(R"(root ::= "\x41\u00e9\U0001F600")", "A\xC3\xA9\xF0\x9F\x98\x80"));
  EXPECT_TRUE(matches(R"(root ::= [\x00-\x1F\]\-\\])", "]"));
  EXPECT_TRUE(matches(R"(root ::= [\x00-\x1F\]\-\\])", "-"));
  EXPECT_TRUE(matches(R"(root ::= [\x00-\x1F\]\-\\])", "\x05"));
  EXPECT_FALSE(matches(R"(root ::= [\x00-\x1F\]\-\\])", "a"));
  EXPECT_TRUE(matches("root ::= \"caf\xC3\xA9\"", "caf\xC3\xA9"));  // raw UTF-8 in a literal
}

TEST(GrammarGbnf, CharClassesAndDot) {
  EXPECT_TRUE(matches("root ::= [a-z0-9_]+", "ab_09"));
  EXPECT_FALSE(matches("root ::= [a-z0-9_]+", "aB"));
  EXPECT_TRUE(matches(R"(root ::= [^"\\]*)", "x\xE2\x82\xAC y"));
  EXPECT_FALSE(matches(R"(root ::= [^"\\]*)", "a\"b"));
  EXPECT_TRUE(matches("root ::= . . .", "a\n\xF0\x9F\x98\x80"));
  EXPECT_FALSE(matches("root ::= .", "ab"));
  EXPECT_TRUE(matches("root ::= [-a]", "-"));  // a leading or trailing '-' is literal
  EXPECT_TRUE(matches("root ::= [a-]", "-"));
}

TEST(GrammarGbnf, RepetitionBounds) {
  const std::string gbnf = "root ::= \"a\"{2,4} \"b\"{3} \"c\"{1,} \"d\"{,2}";
  EXPECT_TRUE(matches(gbnf, "aabbbc"));
  EXPECT_TRUE(matches(gbnf, "aaaabbbcccdd"));
  EXPECT_FALSE(matches(gbnf, "abbbc"));
  EXPECT_FALSE(matches(gbnf, "aaaaabbbc"));
  EXPECT_FALSE(matches(gbnf, "aabbc"));
  EXPECT_FALSE(matches(gbnf, "aabbb"));
  EXPECT_FALSE(matches(gbnf, "aabbbcddd"));
  EXPECT_TRUE(matches("root ::= \"x\" \"a\"{0} \"y\"", "xy"));
  EXPECT_TRUE(matches("root ::= (\"ab\"?){3}", "abab"));
}

TEST(GrammarGbnf, ForwardReferencesAndEmptyLiteral) {
  EXPECT_TRUE(matches("root ::= a b\na ::= \"x\" | \"\"\nb ::= \"y\"", "y"));
  EXPECT_TRUE(matches("root ::= a b\na ::= \"x\" | \"\"\nb ::= \"y\"", "xy"));
}

TEST(GrammarGbnf, ErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("root ::= \"a\"\nfoo ::= bar"), "GBNF line 2, column 9: rule 'bar' is used but never defined");
  EXPECT_EQ(error_of("root ::= \"a"), "GBNF line 1, column 10: unterminated string literal");
  EXPECT_EQ(error_of("root ::= [a-"), "GBNF line 1, column 10: unterminated character class");
  EXPECT_EQ(error_of("root ::= (\"a\""), "GBNF line 1, column 10: unclosed '('");
  EXPECT_EQ(error_of("root = \"a\""), "GBNF line 1, column 6: expected '::=' after rule name 'root'");
  EXPECT_EQ(error_of("root ::= \"\\q\""), "GBNF line 1, column 11: unknown escape '\\q'");
  EXPECT_EQ(error_of("root ::= \"a\"{3,1}"), "GBNF line 1, column 18: repetition {3,1}: maximum below minimum");
  EXPECT_EQ(error_of("root ::= \"a\"\nroot ::= \"b\""), "GBNF line 2, column 1: rule 'root' is defined twice");
  EXPECT_EQ(error_of("a ::= \"x\""), "GBNF: no rule named 'root'");
  EXPECT_EQ(error_of("root ::= [z-a]"), "GBNF line 1, column 11: character range U+7A-U+61 is invalid");
  EXPECT_EQ(error_of("root ::= \"\\uD800\""), "GBNF line 1, column 11: U+D800 is not a character");
  EXPECT_EQ(error_of("root ::= \"a\" ) "), "GBNF line 1, column 14: unexpected ')'");
  EXPECT_EQ(error_of("root ::= \"a\" b ::= \"c\""), "GBNF line 1, column 14: missing newline before the next rule");
  EXPECT_EQ(error_of("root ::= \xFF"), "GBNF line 1, column 10: invalid UTF-8");
}

TEST(GrammarGbnf, LeftRecursionRefused) {
  EXPECT_EQ(error_of("root ::= root \"a\" | \"b\""), "rule 'root' is left-recursive (through 'root')");
  EXPECT_NE(error_of("root ::= a\na ::= b \"x\"\nb ::= a | \"y\"").find("left-recursive"), std::string::npos);
  // Through a nullable prefix.
  EXPECT_NE(error_of("root ::= e root \"a\" | \"b\"\ne ::= \"\" | \"c\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(error_of("root ::= (\"x\"? root) | \"b\"").find("left-recursive"), std::string::npos);
  // Right and middle recursion are fine.
  EXPECT_EQ(error_of("root ::= \"(\" root \")\" | \"\""), "");
  EXPECT_EQ(error_of("root ::= \"a\" root | \"\""), "");
}

TEST(GrammarGbnf, HostileInputRefusedCleanly) {
  const std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
  EXPECT_NE(error_of(deep).find("nested deeper than"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{99999999999999999999}").find("exceeds the limit"), std::string::npos);
  EXPECT_NE(error_of("root ::= \"a\"{1000000}").find("exceeds the limit"), std::string::npos);
  // Nested repetitions multiply only through rule references, but many large ones exceed the element budget.
  std::string many = "root ::=";
  for (int i = 0; i < 40; ++i) many += " \"a\"{100000}";
  EXPECT_NE(error_of(many).find("elements"), std::string::npos);
  // A long chain of rules is validated without deep recursion.
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 50000; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"x\"\n";
  chain += "r50000 ::= \"y\"\n";
  EXPECT_EQ(error_of(chain), "");
}

TEST(GrammarIr, ValidateChecksReferencesAndLiterals) {
  Grammar g;
  const int32_t root = g.add_rule("root");
  g.root = root;
  EXPECT_THROW(g.validate(), GrammarError);  // no alternatives
  g.add_alternative(root, {Grammar::ref(7)});
  EXPECT_THROW(g.validate(), GrammarError);
  g.rules[0].alternatives = {{Grammar::literal("")}};
  EXPECT_THROW(g.validate(), GrammarError);
  g.rules[0].alternatives = {{Grammar::literal("\xC3")}};  // not UTF-8
  EXPECT_THROW(g.validate(), GrammarError);
  g.rules[0].alternatives = {{Grammar::char_class({{0x61, 0x110000}})}};
  EXPECT_THROW(g.validate(), GrammarError);
  g.rules[0].alternatives = {{Grammar::literal("ok")}};
  EXPECT_NO_THROW(g.validate());
}

TEST(GrammarIr, NamesAreUniqueAndHelpersBuildRepetition) {
  Grammar g;
  const int32_t a = g.add_rule("item");
  const int32_t b = g.add_rule("item");
  const int32_t c = g.add_rule("bad name!");
  EXPECT_EQ(g.rules[static_cast<size_t>(a)].name, "item");
  EXPECT_EQ(g.rules[static_cast<size_t>(b)].name, "item_1");
  EXPECT_EQ(g.rules[static_cast<size_t>(c)].name, "bad-name-");
  g.root = a;
  g.add_alternative(a, {g.repeat(Grammar::literal("x"), 2, 3), g.star(Grammar::char_class({{'0', '9'}})),
                        g.optional(Grammar::literal("!"))});
  g.add_alternative(b, {Grammar::literal("unused")});
  g.add_alternative(c, {Grammar::literal("unused")});
  const std::string text = g.to_gbnf();
  EXPECT_TRUE(matches(text, "xx"));
  EXPECT_TRUE(matches(text, "xxx123!"));
  EXPECT_FALSE(matches(text, "x"));
  EXPECT_FALSE(matches(text, "xxxx"));
  EXPECT_THROW(g.repeat(Grammar::literal("x"), 3, 2), GrammarError);
  EXPECT_THROW(g.repeat(Grammar::literal("x"), 0, kMaxRepeat + 1), GrammarError);
}

TEST(GrammarIr, ToGbnfRoundTrips) {
  const std::string src = R"(root ::= obj
obj ::= "{" ws ( pair ( "," ws pair )* )? "}"
pair ::= str ":" ws val
val ::= str | [0-9]+ | obj | "\"\\\n\x01" | [^\x00-\x1F"\]\-\u00e9-\U0010FFFF]
str ::= "\"" [a-z]* "\""
ws ::= [ \t\n]*
)";
  const Grammar g = parse_gbnf(src);
  const Grammar again = parse_gbnf(g.to_gbnf());
  // The same rules, perhaps in another order (rules are numbered as first seen).
  const auto lines = [](const std::string& text) {
    std::multiset<std::string> out;
    std::stringstream in(text);
    for (std::string line; std::getline(in, line);) out.insert(line);
    return out;
  };
  EXPECT_EQ(lines(again.to_gbnf()), lines(g.to_gbnf()));
  for (const char* text : {"{}", "{ \"a\":1,\"b\":{\"c\": \"d\"}}", "{\"a\":\"\\\n\x01\"}", "{\"a\":]}"}) {
    EXPECT_EQ(matches(src, text), matches(g.to_gbnf(), text)) << text;
  }
  EXPECT_FALSE(matches(src, "{\"a\":-}"));
  EXPECT_TRUE(matches(src, "{\"a\":x}"));
}

}  // namespace
}  // namespace tide::grammar
