// The compiled JSON Schema, regex and choice grammars through the engine's GrammarMatcher: on samples and
// their mutations (truncated, a byte changed, a byte inserted), the matcher and the independent recognizer of
// grammar_schema_test_util.h agree; masks along random walks equal the brute-force masks; the GBNF text of
// a compiled grammar reads back to the same language.
#include <gtest/gtest.h>

#include "grammar/choice.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar_schema_test_util.h"
#include "grammar_test_util.h"

namespace tide::test {
namespace {

using grammar::compile_json_schema;

bool matcher_accepts(const std::shared_ptr<const grammar::CompiledGrammar>& compiled, std::string_view text) {
  grammar::GrammarMatcher m(compiled);
  return m.accept_bytes(text) && m.can_end();
}

std::vector<std::string> mutations(const std::string& text, std::mt19937& rng) {
  std::vector<std::string> out{text, text.substr(0, text.size() / 2), text + " ", text + "}"};
  for (int i = 0; i < 4 && !text.empty(); ++i) {
    std::string changed = text;
    const size_t at = std::uniform_int_distribution<size_t>(0, text.size() - 1)(rng);
    static const char kBytes[] = "\",:{}[]0-9.eE \\nux\xc3\xa9";
    changed[at] = kBytes[std::uniform_int_distribution<size_t>(0, sizeof(kBytes) - 2)(rng)];
    out.push_back(changed);
    std::string inserted = text;
    inserted.insert(at, 1, kBytes[std::uniform_int_distribution<size_t>(0, sizeof(kBytes) - 2)(rng)]);
    out.push_back(inserted);
  }
  return out;
}

void expect_matcher_agrees(const Grammar& g, uint32_t seed, int samples = 60) {
  const auto compiled = grammar::compile(g, grammar::test::byte_vocabulary());
  const Grammar reread = grammar::parse_gbnf(g.to_gbnf());
  Sampler sampler(g);
  std::mt19937 rng(seed);
  int accepted = 0;
  for (int i = 0; i < samples; ++i) {
    for (const std::string& text : mutations(sampler.sample(rng, 16), rng)) {
      const bool expected = accepts(g, text);
      accepted += expected;
      EXPECT_EQ(matcher_accepts(compiled, text), expected) << text;
      EXPECT_EQ(accepts(reread, text), expected) << "GBNF round trip: " << text;
    }
  }
  EXPECT_GE(accepted, samples);
}

TEST(GrammarSchemaMatcher, SchemasAgreeWithTheRecognizer) {
  const std::vector<std::string> schemas = {
      R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer",
          "minimum": 0, "maximum": 150}, "tags": {"type": "array", "items": {"enum": ["a", "b\"", "é"]}, "maxItems": 3}},
          "required": ["name"]})",
      R"({"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": {"type": "number",
          "exclusiveMinimum": -2.5, "maximum": 10}})",
      R"({"$defs": {"t": {"type": "object", "properties": {"v": {"type": ["number", "null"]}, "kids": {"type": "array",
          "items": {"$ref": "#/$defs/t"}}}, "required": ["v"]}}, "$ref": "#/$defs/t"})",
      R"({"anyOf": [{"type": "string", "format": "date-time"}, {"type": "string", "pattern": "^[A-Z]{2}\\d+$"},
          {"type": "boolean"}]})",
      R"({"type": "array", "prefixItems": [{"type": "string", "format": "uuid"}, {"const": {"k": [1, 2.5]}}], "minItems": 1})",
      R"({"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 300}, "maxItems": 3})",
  };
  uint32_t seed = 1;
  for (const std::string& text : schemas) {
    SCOPED_TRACE(text);
    expect_matcher_agrees(compile_json_schema(Json::parse(text)), seed++);
  }
  expect_matcher_agrees(grammar::any_json(), seed++);
  // Every length of a long bounded string (built from chunks), through the matcher.
  const auto long_strings = grammar::compile(compile_json_schema(Json::parse(R"({"type": "string", "maxLength": 500})")),
                                             grammar::test::byte_vocabulary());
  for (size_t n = 0; n <= 505; ++n) {
    EXPECT_EQ(matcher_accepts(long_strings, "\"" + std::string(n, 'x') + "\""), n <= 500) << n;
  }
  grammar::JsonSchemaOptions ws;
  ws.any_whitespace = true;
  ws.max_whitespace = 3;
  expect_matcher_agrees(compile_json_schema(Json::parse(schemas[0]), ws), seed++);
}

TEST(GrammarSchemaMatcher, RegexAndChoiceAgreeWithTheRecognizer) {
  uint32_t seed = 100;
  for (const char* pattern : {R"(\d{3}-\d{4})", "(cat|dog)s?( and (cat|dog)s?)*", "[^\"\\\\]{0,5}", "é+[中-文]?.",
                              R"((a?b?)*c)", R"([\w.+-]+@[a-z]+\.(com|org))"}) {
    SCOPED_TRACE(pattern);
    expect_matcher_agrees(grammar::compile_regex(pattern), seed++);
  }
  expect_matcher_agrees(grammar::compile_choice({"positive", "negative", "neutral", "pos"}), seed++);
}

TEST(GrammarSchemaMatcher, MasksEqualBruteForce) {
  const Grammar g = compile_json_schema(Json::parse(R"({"type": "object", "properties": {"n": {"type": "integer",
      "minimum": -20, "maximum": 300}, "s": {"enum": ["x", "yz"]}, "f": {"type": "number", "minimum": 0.5,
      "exclusiveMaximum": 2}}, "required": ["n", "f"]})"));
  const auto compiled = grammar::compile(g, grammar::test::byte_vocabulary());
  int states = 0;
  for (uint32_t seed = 0; seed < 8; ++seed) {
    const std::string text = grammar::test::walk_and_check(compiled, seed, 200, &states);
    EXPECT_TRUE(accepts(g, text) || !matcher_accepts(compiled, text)) << text;
  }
  EXPECT_GT(states, 100);
}

}  // namespace
}  // namespace tide::test
