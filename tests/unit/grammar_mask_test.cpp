// Token masks against brute force: at every state reached while walking random sentences, the mask equals
// trying every token on a copy of the matcher. On the fixture tokenizers (cohere2-tiny: 1,024 tokens,
// tide-demo: 4,096) and a random vocabulary with multi-byte and partial UTF-8 tokens.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <random>
#include <string>

#include "grammar_test_util.h"
#include "tokenizer/tokenizer.h"

namespace tide::grammar {
namespace {

const char* const kGrammars[] = {
    // JSON-like
    R"g(root ::= value
value ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( ws "," ws member )* )? ws "}"
member ::= string ws ":" ws value
array ::= "[" ws ( value ( ws "," ws value )* )? ws "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws ::= [ \t\n]{0,3})g",
    // A fixed-shape object (as a JSON schema compiles to), with an enum and bounded strings
    R"g(root ::= "{\"name\": " str ", \"kind\": " kind ", \"tags\": [" ( str ( ", " str ){0,3} )? "], \"n\": " int "}"
str ::= "\"" [a-zA-Z0-9 _\u00e0-\u00ff\u4e00-\u9fff]{0,12} "\""
kind ::= "\"alpha\"" | "\"beta\"" | "\"alphabet\"" | "\"gamma ray\""
int ::= "-"? [1-9] [0-9]{0,5} | "0")g",
    // Arithmetic with nesting
    R"g(root ::= expr
expr ::= term ( ws [-+] ws term )*
term ::= factor ( ws [*/] ws factor )*
factor ::= [0-9]+ ( "." [0-9]+ )? | "(" ws expr ws ")" | "-" factor
ws ::= " "?)g",
    // Ambiguity, Unicode, repetition bounds
    R"g(root ::= ( word | words ) ( " " ( word | [a-z]+ ) ){0,4} "."?
word ::= [a-z\u00e9\u65e5\U0001F600]{1,6}
words ::= [a-z]+ ( "-" [a-z]+ )*)g",
    // Free text up to a marker, then a choice
    R"g(root ::= "Answer: " ( [^\n] )* "\n" ( "yes" | "no" | "maybe" ))g",
};

void check_grammars(const std::shared_ptr<const TokenVocabulary>& vocabulary, int seeds, int max_tokens) {
  int states = 0;
  for (const char* gbnf : kGrammars) {
    const auto compiled = compile(parse_gbnf(gbnf), vocabulary);
    for (int seed = 0; seed < seeds; ++seed) {
      test::walk_and_check(compiled, static_cast<uint32_t>(seed * 7919 + 1), max_tokens, &states);
      if (::testing::Test::HasFailure()) return;
    }
  }
  EXPECT_GT(states, seeds * 5);
}

std::shared_ptr<const TokenVocabulary> tokenizer_vocabulary(const std::filesystem::path& dir) {
  const Tokenizer tokenizer = Tokenizer::from_dir(dir);
  std::vector<int32_t> stops;
  if (tokenizer.eos_id()) stops.push_back(*tokenizer.eos_id());
  return TokenVocabulary::from_tokenizer(tokenizer, stops);
}

TEST(GrammarMask, MatchesBruteForceOnCohere2Tiny) {
  const auto vocabulary = tokenizer_vocabulary(std::filesystem::path(TIDE_FIXTURES_DIR) / "cohere2-tiny");
  ASSERT_EQ(vocabulary->size(), 1024);
  check_grammars(vocabulary, 12, 40);
}

TEST(GrammarMask, MatchesBruteForceOnTideDemo) {
  const auto vocabulary = tokenizer_vocabulary(std::filesystem::path(TIDE_MODELS_DIR) / "tide-demo");
  ASSERT_EQ(vocabulary->size(), 4096);
  check_grammars(vocabulary, 6, 40);
}

// Random tokens from pieces that matter to the grammars above, with multi-byte characters cut at every byte
// position, so tokens start and end inside characters.
std::shared_ptr<const TokenVocabulary> random_vocabulary(uint32_t seed, int size) {
  const std::vector<std::string> pieces{"{",  "}",  "[",  "]",  "\"", "\\", ":",  ",",  " ",  "\n", "-",  "+",
                                        ".",  "0",  "1",  "7",  "e",  "E",  "a",  "b",  "z",  "t",  "u",  "n",
                                        "l",  "f",  "(",  ")",  "*",  "/",  "\xC3\xA9", "\xE6\x97\xA5",
                                        "\xF0\x9F\x98\x80", "true", "null", "alpha", "beta", "Answer", "yes",
                                        "no", "maybe", "name", "kind", "tags", "\\u00", "\xC3\xA0\xC3\xBF"};
  std::mt19937 rng(seed);
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  while (static_cast<int>(tokens.size()) < size) {
    std::string t;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) t += pieces[rng() % pieces.size()];
    if (rng() % 3 == 0 && t.size() > 1) {  // cut anywhere, often inside a character
      const size_t a = rng() % t.size();
      t = t.substr(a, 1 + rng() % (t.size() - a));
    }
    tokens.push_back(t);
  }
  tokens.emplace_back("<eos>");
  tokens.emplace_back("<special>");
  tokens.emplace_back("");  // an id with no bytes: never allowed
  const auto n = static_cast<int32_t>(tokens.size());
  return std::make_shared<const TokenVocabulary>(std::move(tokens), std::vector<int32_t>{n - 3}, std::vector<int32_t>{n - 2});
}

TEST(GrammarMask, MatchesBruteForceOnRandomVocabulary) {
  for (const uint32_t seed : {1u, 2u, 3u}) {
    check_grammars(random_vocabulary(seed, 2500), 8, 50);
    if (HasFailure()) return;
  }
}

TEST(GrammarMask, SecondRequestReusesCachedMasks) {
  const auto vocabulary = random_vocabulary(9, 2000);
  const auto compiled = compile(parse_gbnf(kGrammars[1]), vocabulary);
  const std::string first = test::walk_and_check(compiled, 5, 60);
  const auto before = compiled->stats();
  EXPECT_GT(before.nodes_classified, 0u);
  const std::string second = test::walk_and_check(compiled, 5, 60);  // same seed: the same states
  EXPECT_EQ(first, second);
  const auto after = compiled->stats();
  EXPECT_EQ(after.nodes_classified, before.nodes_classified);
  EXPECT_EQ(after.mask_cache_misses, before.mask_cache_misses);
  EXPECT_GT(after.mask_cache_hits, before.mask_cache_hits);
}

TEST(GrammarMask, StopIdsOnlyWhereTheTextCanEnd) {
  const auto vocabulary = random_vocabulary(4, 1000);
  const int32_t eos = vocabulary->stop_ids()[0];
  GrammarMatcher m(compile(parse_gbnf("root ::= \"ab\" | \"abc\""), vocabulary));
  std::vector<uint32_t> mask(vocabulary->mask_words());
  m.fill_mask(mask);
  EXPECT_FALSE(test::bit(mask, eos));
  ASSERT_TRUE(m.accept_bytes("ab"));
  m.fill_mask(mask);
  EXPECT_TRUE(test::bit(mask, eos));
  EXPECT_TRUE(test::bit(mask, 'c'));
  EXPECT_FALSE(test::bit(mask, vocabulary->size() - 2));  // special
  EXPECT_FALSE(test::bit(mask, vocabulary->size() - 1));  // empty
}

}  // namespace
}  // namespace tide::grammar

namespace tide::grammar {
namespace {

TEST(GrammarMask, ConcurrentRequestsShareOneCompiledGrammar) {
  const auto vocabulary = random_vocabulary(11, 1500);
  const auto compiled = compile(parse_gbnf(kGrammars[0]), vocabulary);
  std::vector<std::thread> threads;
  std::atomic<int> states{0};
  for (uint32_t t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      int checked = 0;
      test::walk_and_check(compiled, 100 + t % 2, 30, &checked);  // two threads per seed: same states at once
      states += checked;
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_GT(states.load(), 20);
}

TEST(GrammarVocabulary, TokenBytesFromTheTokenizer) {
  const Tokenizer tokenizer = Tokenizer::from_dir(std::filesystem::path(TIDE_FIXTURES_DIR) / "cohere2-tiny");
  const auto vocabulary = TokenVocabulary::from_tokenizer(tokenizer, {*tokenizer.eos_id()});
  const std::string text = "Grüße, 世界! {\"a\": [1, 2.5e-3]}\n\ttab";
  std::string joined;
  for (const int32_t id : tokenizer.encode(text, false)) joined += vocabulary->token_bytes(id);
  EXPECT_EQ(joined, text);
  EXPECT_TRUE(vocabulary->is_stop(*tokenizer.eos_id()));
  size_t special = 0;
  for (int32_t id = 0; id < vocabulary->size(); ++id) {
    if (tokenizer.is_special(id)) {
      ++special;
      EXPECT_TRUE(vocabulary->is_never_allowed(id) || vocabulary->is_stop(id)) << id;
    }
  }
  EXPECT_GT(special, 0u);
  // The stand-in tokenizer: ids 0-255 are bytes.
  const auto stand_in = TokenVocabulary::from_tokenizer(Tokenizer::stand_in(300), {});
  EXPECT_EQ(stand_in->token_bytes(0xC3), "\xC3");
  EXPECT_EQ(stand_in->size(), 300);
}

TEST(GrammarVocabulary, SortedViewAndSubtrees) {
  const TokenVocabulary v({"b", "ab", "a", "abc", "abd", "ac", "ab", "", "c"}, {8}, {});
  ASSERT_EQ(v.string_count(), 6u);  // a ab abc abd ac b ("" never allowed, "c" a stop id, "ab" twice)
  EXPECT_EQ(v.string(0), "a");
  EXPECT_EQ(v.string(1), "ab");
  EXPECT_EQ(v.ids_of(1).size(), 2u);
  EXPECT_EQ(v.common_prefix(2), 2u);
  EXPECT_EQ(v.subtree_end(0, 0), 5u);  // everything under "a"
  EXPECT_EQ(v.subtree_end(1, 1), 4u);  // under "ab"
  EXPECT_EQ(v.subtree_end(2, 2), 3u);  // under "abc"
  EXPECT_TRUE(v.is_never_allowed(7));
  EXPECT_THROW(TokenVocabulary({"a"}, {3}, {}), GrammarError);
}

}  // namespace
}  // namespace tide::grammar
