// GrammarMatcher on small grammars: accepted and rejected texts and prefixes, can_end / is_terminated, tokens,
// rollback, Unicode classes against every code point, and grammars the engine refuses.
#include <gtest/gtest.h>

#include <string>

#include "core/utf8_encode.h"
#include "grammar_test_util.h"

namespace tide::grammar {
namespace {

using test::matches;
using test::prefix_ok;

const std::string kJson = R"(
root ::= value
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( ws "," ws member )* )? ws "}"
member ::= string ws ":" ws value
array ::= "[" ws ( value ( ws "," ws value )* )? ws "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws ::= [ \t\n]*
)";

TEST(GrammarMatch, JsonLike) {
  for (const char* ok : {"{}", "[]", "0", "-1.5e+10", "\"\"", "\"a\\u00e9\\n\"", "{\"a\": [1, 2, {\"b\": null}]}",
                         "[true,false,null]", "\"\xE6\x97\xA5\xE6\x9C\xAC\"", "{ \"k\" : \"v\" , \"x\":[ ]}"}) {
    EXPECT_TRUE(matches(kJson, ok)) << ok;
  }
  for (const char* bad : {"{", "01", "1.", "\"\\x\"", "[1,]", "{\"a\"}", "tru", "\"a\nb\"", "{} ", "-"}) {
    EXPECT_FALSE(matches(kJson, bad)) << bad;
  }
  EXPECT_TRUE(prefix_ok(kJson, "{\"a\": [1, "));
  EXPECT_TRUE(prefix_ok(kJson, "\"\xE6\x97"));  // inside a character
  EXPECT_FALSE(prefix_ok(kJson, "{\"a\": ]"));
  EXPECT_FALSE(prefix_ok(kJson, "\"\xE6\x41"));  // a broken character
}

TEST(GrammarMatch, Arithmetic) {
  const std::string g = R"g(
root ::= expr
expr ::= term ( [-+] term )*
term ::= factor ( [*/] factor )*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
)g";
  EXPECT_TRUE(matches(g, "1+2*3"));
  EXPECT_TRUE(matches(g, "(1+2)*-(3/4)"));
  EXPECT_TRUE(matches(g, "((((7))))"));
  EXPECT_FALSE(matches(g, "1+"));
  EXPECT_FALSE(matches(g, "(1+2"));
  EXPECT_FALSE(matches(g, "1+2)"));
  EXPECT_FALSE(matches(g, "*1"));
}

TEST(GrammarMatch, NestedBrackets) {
  const std::string g = "root ::= item*\nitem ::= \"(\" root \")\" | \"[\" root \"]\"";
  EXPECT_TRUE(matches(g, ""));
  EXPECT_TRUE(matches(g, "([])[()()]"));
  EXPECT_TRUE(matches(g, std::string(500, '(') + std::string(500, ')')));
  EXPECT_FALSE(matches(g, "([)]"));
  EXPECT_FALSE(matches(g, "(()"));
  EXPECT_TRUE(prefix_ok(g, "(()[["));
}

TEST(GrammarMatch, AmbiguousGrammars) {
  // Several parses of the same text; the stack set stays deduplicated.
  const std::string g = "root ::= (\"a\" | \"aa\" | \"a\" \"a\")* \"b\"";
  EXPECT_TRUE(matches(g, "aaaaaaab"));
  GrammarMatcher m = test::matcher_for(g);
  ASSERT_TRUE(m.accept_bytes(std::string(200, 'a')));
  EXPECT_LE(m.stack_count(), 4u);
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.accept_bytes("b"));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_TRUE(matches("root ::= x x\nx ::= \"a\"*", "aaaa"));
  EXPECT_TRUE(matches("root ::= ([a-z]+ | [a-c]+) \"!\"", "abc!"));
}

TEST(GrammarMatch, UnicodeClasses) {
  const std::string g = "root ::= [\\u00e0-\\u00ff\\u4e00-\\u9fff\\U0001F600-\\U0001F64F]+";
  EXPECT_TRUE(matches(g, "\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80"));
  EXPECT_FALSE(matches(g, "e"));
  EXPECT_FALSE(matches(g, "\xC3\x9F"));  // U+00DF
  // Every code point against a class with ranges in each encoding length, and its complement.
  const std::vector<CharRange> ranges{{0x41, 0x5A}, {0x7F, 0x81}, {0x7FE, 0x801}, {0xD7FF, 0xE000}, {0xFFFE, 0x10001},
                                      {0x10FFFE, 0x10FFFF}};
  for (const bool negated : {false, true}) {
    Grammar gr;
    gr.root = gr.add_rule("root");
    gr.add_alternative(gr.root, {Grammar::char_class(ranges, negated)});
    const auto compiled = compile(gr, test::byte_vocabulary());
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x20000 ? 1 : 97)) {
      bool in = false;
      for (const CharRange& r : ranges) in = in || (cp >= r.lo && cp <= r.hi);
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      std::string text;
      append_utf8_code_point(static_cast<char32_t>(cp), text);
      GrammarMatcher m(compiled);
      ASSERT_EQ(m.accept_bytes(text) && m.can_end(), in != negated) << std::hex << cp << " negated " << negated;
    }
    // Surrogates and overlong forms are never characters.
    GrammarMatcher m(compiled);
    EXPECT_FALSE(m.accept_bytes("\xED\xA0\x80"));
    EXPECT_FALSE(m.accept_bytes("\xC0\x80"));
    EXPECT_FALSE(m.accept_bytes("\xF4\x90\x80\x80"));
  }
}

TEST(GrammarMatch, EmptyClassesMakeAlternativesDead) {
  // [^\x00-\U0010FFFF] matches nothing; its alternative is dropped.
  EXPECT_TRUE(matches("root ::= \"a\" [^\\x00-\\U0010FFFF] | \"b\"", "b"));
  EXPECT_FALSE(prefix_ok("root ::= \"a\" [^\\x00-\\U0010FFFF] | \"b\"", "a"));
  EXPECT_THROW(test::matcher_for("root ::= []"), GrammarError);
  EXPECT_THROW(test::matcher_for("root ::= x\nx ::= \"a\" x"), GrammarError);  // no finite derivation
}

TEST(GrammarMatch, CanEndAndTerminated) {
  GrammarMatcher m = test::matcher_for("root ::= \"ab\" \"c\"?");
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.accept_bytes("ab"));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.is_terminated());
  EXPECT_FALSE(m.accept_bytes("x"));
  EXPECT_TRUE(m.can_end());  // unchanged after a refusal
  EXPECT_TRUE(m.accept_bytes("c"));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_bytes("c"));
  std::vector<uint32_t> mask(m.vocabulary().mask_words());
  m.fill_mask(mask);
  for (int32_t id = 0; id < m.vocabulary().size(); ++id) EXPECT_EQ(test::bit(mask, id), id == 256) << id;
}

TEST(GrammarMatch, TokensStopAndSpecial) {
  GrammarMatcher m = test::matcher_for("root ::= \"hi\"");
  EXPECT_FALSE(m.accept_token(256));  // the stop id before the text can end
  EXPECT_FALSE(m.accept_token(257));  // special: never
  EXPECT_FALSE(m.accept_token(-1));
  EXPECT_FALSE(m.accept_token(9999));
  EXPECT_TRUE(m.accept_token('h'));
  EXPECT_TRUE(m.accept_token('i'));
  EXPECT_TRUE(m.accept_token(256));
  EXPECT_TRUE(m.is_stopped());
  EXPECT_FALSE(m.accept_token('h'));
  EXPECT_TRUE(m.rollback(1));
  EXPECT_FALSE(m.is_stopped());
  EXPECT_TRUE(m.rollback(2));
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.accept_token('h'));
  EXPECT_FALSE(m.rollback(3));
  m.reset();
  EXPECT_FALSE(m.accept_token('i'));
}

TEST(GrammarMatch, PartialUtf8Tokens) {
  // Tokens that end inside a character and tokens that start inside one.
  auto vocab = std::make_shared<const TokenVocabulary>(
      std::vector<std::string>{"\"", "\xE6", "\x97\xA5", "\xE6\x97", "\xA5\"", "a", "\xA5"}, std::vector<int32_t>{});
  GrammarMatcher m(compile(parse_gbnf(R"(root ::= "\"" [^"]* "\"")"), vocab));
  EXPECT_TRUE(m.accept_token(0));
  EXPECT_FALSE(m.accept_token(2));  // a continuation byte cannot start a character
  EXPECT_TRUE(m.accept_token(1));
  EXPECT_FALSE(m.accept_token(5));
  EXPECT_TRUE(m.accept_token(2));
  EXPECT_TRUE(m.accept_token(3));
  EXPECT_TRUE(m.accept_token(4));
  EXPECT_TRUE(m.is_terminated());
}

TEST(GrammarMatch, ExplosionRefused) {
  // Every "a" doubles the distinct parse stacks (two return points per level).
  GrammarMatcher m = test::matcher_for("root ::= x\nx ::= \"a\" x \"b\" | \"a\" x \"c\" | \"d\"");
  EXPECT_THROW(
      {
        for (int i = 0; i < 40; ++i) m.accept_bytes("a");
      },
      GrammarError);
  // Exponentially many ways to start: refused at compile time.
  std::string g = "root ::= r0\n";
  for (int i = 0; i < 20; ++i) {
    g += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"x\" | r" + std::to_string(i + 1) + " \"y\"\n";
  }
  g += "r20 ::= \"z\"\n";
  EXPECT_THROW(test::matcher_for(g), GrammarError);
  // Rules nested without consuming beyond the bound (small rules are inlined, so it takes a long chain).
  std::string chain = "root ::= r0\n";
  for (int i = 0; i < 40000; ++i) chain += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + " \"x\"\n";
  chain += "r40000 ::= \"y\"\n";
  EXPECT_THROW(test::matcher_for(chain), GrammarError);
}

TEST(GrammarMatch, LongRepetitionsStayFlat) {
  GrammarMatcher m = test::matcher_for("root ::= [a-z]{0,5000} \";\"");
  ASSERT_TRUE(m.accept_bytes(std::string(4000, 'q')));
  EXPECT_LE(m.stack_count(), 2u);  // inside the repetition, and past its end
  EXPECT_FALSE(m.accept_bytes(std::string(1001, 'q')));
  EXPECT_TRUE(m.accept_bytes(std::string(1000, 'q') + ";"));
  EXPECT_TRUE(m.is_terminated());
}

}  // namespace
}  // namespace tide::grammar
