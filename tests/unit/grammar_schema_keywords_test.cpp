// compile_json_schema's keyword handling: refusals name the keyword and its JSON pointer, annotations are
// ignored, formats and patterns, $ref resolution and its cycles, allOf merges.
#include <gtest/gtest.h>

#include "grammar/json_schema.h"
#include "grammar_schema_test_util.h"

namespace tide::test {
namespace {

using grammar::compile_json_schema;
using grammar::GrammarError;

std::string refusal(const std::string& schema_text) {
  try {
    compile_json_schema(Json::parse(schema_text));
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(GrammarSchemaKeywords, UnsupportedKeywordsNameKeywordAndPointer) {
  EXPECT_EQ(refusal(R"({"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": true}}})"),
            "unsupported JSON Schema keyword 'uniqueItems' at /properties/tags");
  EXPECT_EQ(refusal(R"({"not": {"type": "null"}})"), "unsupported JSON Schema keyword 'not' at /");
  EXPECT_EQ(refusal(R"({"$defs": {"x": {"multipleOf": 3}}, "type": "array", "items": {"$ref": "#/$defs/x"}})"),
            "unsupported JSON Schema keyword 'multipleOf' at /$defs/x");
  EXPECT_EQ(refusal(R"({"properties": {"a/b": {"properties": {"c~d": {"minProperties": 1}}}}})"),
            "unsupported JSON Schema keyword 'minProperties' at /properties/a~1b/properties/c~0d");
  for (const char* keyword : {"not", "if", "then", "else", "patternProperties", "propertyNames", "dependentSchemas",
                              "dependentRequired", "dependencies", "multipleOf", "contains", "minContains",
                              "maxContains", "minProperties", "maxProperties", "unevaluatedProperties",
                              "unevaluatedItems", "$dynamicRef", "$recursiveRef"}) {
    const std::string schema = R"({"anyOf": [{"type": "null"}, {")" + std::string(keyword) + R"(": 1}]})";
    EXPECT_EQ(refusal(schema), "unsupported JSON Schema keyword '" + std::string(keyword) + "' at /anyOf/1") << keyword;
  }
  EXPECT_EQ(refusal(R"({"type": "array", "uniqueItems": false})"), "(accepted)");
}

TEST(GrammarSchemaKeywords, AnnotationsAreIgnored) {
  const Json plain = Json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})");
  const Json annotated = Json::parse(R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x",
      "$comment": "c", "title": "T", "description": "D", "type": "object", "examples": [{"a": 1}], "default": {},
      "properties": {"a": {"type": "integer", "deprecated": true, "readOnly": true, "writeOnly": false,
      "default": 3, "description": "n", "x-vendor": 1}}, "required": ["a"]})");
  const Grammar a = compile_json_schema(plain), b = compile_json_schema(annotated);
  for (const char* text : {R"({"a": 1})", R"({"a": -20})", R"({})", R"({"a": "1"})"}) {
    EXPECT_EQ(accepts(a, text), accepts(b, text)) << text;
  }
}

TEST(GrammarSchemaKeywords, Formats) {
  const std::map<std::string, std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {"date", {{"2024-02-29", "1999-12-31"}, {"2024-13-01", "2024-1-01", "24-01-01", "2024-01-32"}}},
      {"time", {{"23:59:60Z", "00:00:00.123+05:30", "12:34:56-08:00"}, {"24:00:00Z", "12:00:00", "12:60:00Z"}}},
      {"date-time", {{"2024-05-06T07:08:09Z", "2024-05-06T07:08:09.5+01:00"}, {"2024-05-06 07:08:09Z", "2024-05-06"}}},
      {"uuid", {{"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"}}},
      {"email", {{"a.b+c@example.co.uk", "x@y.io"}, {"@x.io", "a@b", "a b@c.io", "a@@b.io"}}},
      {"ipv4", {{"0.0.0.0", "255.255.255.255", "10.1.20.199"}, {"256.1.1.1", "01.2.3.4", "1.2.3", "1.2.3.4.5"}}},
      {"ipv6", {{"2001:db8:0:0:0:0:2:1", "ABCD:ef01:2345:6789:abcd:ef01:2345:6789"}, {"2001:db8::1", "1:2:3:4:5:6:7"}}},
      {"hostname", {{"example.com", "a-b.c9", "localhost"}, {"-a.com", "a..b", "a_b.com"}}},
      {"uri", {{"https://example.com/a?b=c#d", "urn:isbn:0451450523"}, {"//example.com", "1http://x", "http:"}}},
  };
  std::mt19937 rng(5);
  for (const auto& [format, examples] : cases) {
    SCOPED_TRACE(format);
    const Json schema = {{"type", "string"}, {"format", format}};
    const Grammar g = compile_json_schema(schema);
    for (const std::string& s : examples.first) EXPECT_TRUE(accepts(g, Json(s).dump())) << s;
    for (const std::string& s : examples.second) EXPECT_FALSE(accepts(g, Json(s).dump())) << s;
    SchemaValidator validator(schema);
    Sampler sampler(g);
    for (int i = 0; i < 100; ++i) {
      const std::string text = sampler.sample(rng, 40);
      EXPECT_EQ(validator.check(Json::parse(text)), "") << text;
    }
  }
  EXPECT_EQ(refusal(R"({"properties": {"c": {"type": "string", "format": "color"}}})"),
            "JSON Schema: unsupported string format 'color' at /properties/c");
}

TEST(GrammarSchemaKeywords, PatternsSearchAndEscape) {
  const Grammar unanchored = compile_json_schema(Json::parse(R"({"type": "string", "pattern": "ab+c"})"));
  EXPECT_TRUE(accepts(unanchored, R"("xxabbcyy")"));
  EXPECT_TRUE(accepts(unanchored, R"("abc")"));
  EXPECT_FALSE(accepts(unanchored, R"("ac")"));
  const Grammar prefix = compile_json_schema(Json::parse(R"({"type": "string", "pattern": "^ab|c$"})"));
  EXPECT_TRUE(accepts(prefix, R"("abz")"));
  EXPECT_TRUE(accepts(prefix, R"("zc")"));
  EXPECT_FALSE(accepts(prefix, R"("zab")"));
  // The pattern matches the decoded string: a quote, a backslash and a newline are written escaped.
  const Grammar escapes = compile_json_schema(Json::parse(R"({"type": "string", "pattern": "^a\"b\\\\c\\n$"})"));
  EXPECT_TRUE(accepts(escapes, R"("a\"b\\c\n")"));
  EXPECT_FALSE(accepts(escapes, "\"a\"b\\c\n\""));
  const Json schema = Json::parse(R"({"type": "string", "pattern": "^[a-z0-9_]+$", "minLength": 3, "maxLength": 5})");
  const Grammar bounded = compile_json_schema(schema);
  EXPECT_TRUE(accepts(bounded, R"("abc")"));
  EXPECT_FALSE(accepts(bounded, R"("ab")"));
  EXPECT_FALSE(accepts(bounded, R"("abcdef")"));
  std::mt19937 rng(2);
  Sampler sampler(bounded);
  SchemaValidator validator(schema);
  for (int i = 0; i < 100; ++i) {
    const std::string text = sampler.sample(rng);
    EXPECT_EQ(validator.check(Json::parse(text)), "") << text;
  }
  EXPECT_NE(refusal(R"({"type": "string", "pattern": "(a)\\1"})").find("backreferences"), std::string::npos);
  EXPECT_NE(refusal(R"({"type": "string", "pattern": "^x+y$", "maxLength": 3})").find("maxLength"), std::string::npos);
  EXPECT_EQ(refusal(R"({"type": "string", "format": "date", "maxLength": 10})"), "(accepted)");  // implied
}

TEST(GrammarSchemaKeywords, StringLengthsCountCodePoints) {
  const Grammar g = compile_json_schema(Json::parse(R"({"type": "string", "minLength": 2, "maxLength": 3})"));
  EXPECT_TRUE(accepts(g, "\"日本\""));
  EXPECT_TRUE(accepts(g, "\"😀\\n😀\""));
  EXPECT_TRUE(accepts(g, R"("\u00e9\"")"));
  EXPECT_FALSE(accepts(g, "\"日\""));
  EXPECT_FALSE(accepts(g, "\"日本語!\""));
}

TEST(GrammarSchemaKeywords, RefProblems) {
  EXPECT_NE(refusal(R"({"$ref": "https://example.com/s.json"})").find("only local references"), std::string::npos);
  EXPECT_NE(refusal(R"({"$ref": "#/$defs/missing"})").find("points to nothing"), std::string::npos);
  EXPECT_NE(refusal(R"({"$ref": "#"})").find("recurses without adding text"), std::string::npos);
  EXPECT_NE(refusal(R"({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}}, "$ref": "#/$defs/a"})")
                .find("recurses without adding text"),
            std::string::npos);
  EXPECT_NE(refusal(R"({"anyOf": [{"$ref": "#"}, {"type": "null"}]})").find("recurses"), std::string::npos);
  EXPECT_NE(refusal(R"({"allOf": [{"$ref": "#"}]})"), "(accepted)");  // merges without end: bounded
  EXPECT_EQ(refusal(R"({"$defs": {"a": {"type": "integer"}}, "$ref": "#/%24defs/a"})"), "(accepted)");
}

TEST(GrammarSchemaKeywords, AllOfMergesOnlyTrivially) {
  EXPECT_EQ(refusal(R"({"allOf": [{"type": "string", "pattern": "a"}, {"pattern": "b"}]})"),
            "JSON Schema: allOf members with differing 'pattern' cannot be merged at /allOf/1");
  EXPECT_NE(refusal(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})").find("no type in common"), std::string::npos);
  EXPECT_NE(refusal(R"({"allOf": [{"properties": {"a": {}}, "additionalProperties": false}, {"properties": {"b": {}}}]})")
                .find("additionalProperties"),
            std::string::npos);
  const Json merged = Json::parse(R"({"allOf": [{"type": ["integer", "string"], "minimum": 1, "maximum": 10},
      {"type": "number", "minimum": 3, "maximum": 20}, {"enum": [2, 3, 7, 11]}]})");
  const Grammar g = compile_json_schema(merged);
  EXPECT_TRUE(accepts(g, "3"));
  EXPECT_TRUE(accepts(g, "7"));
  EXPECT_FALSE(accepts(g, "2"));
  EXPECT_FALSE(accepts(g, "11"));
}

TEST(GrammarSchemaKeywords, OtherRefusals) {
  EXPECT_NE(refusal("false").find("admits no value"), std::string::npos);
  EXPECT_NE(refusal(R"({"type": "string", "enum": [1, 2]})").find("no enum"), std::string::npos);
  EXPECT_NE(refusal(R"({"type": "strin"})").find("unknown type 'strin'"), std::string::npos);
  EXPECT_NE(refusal(R"({"type": "array", "minItems": 3, "maxItems": 2})").find("minItems"), std::string::npos);
  EXPECT_NE(refusal(R"({"type": "object", "required": ["a"], "additionalProperties": false})").find("'a'"), std::string::npos);
  EXPECT_NE(refusal(R"({"type": "array", "minItems": 1000000})").find("minItems"), std::string::npos);
  EXPECT_NE(refusal(R"({"type": "string", "minLength": -1})").find("minLength"), std::string::npos);
  EXPECT_NE(refusal(R"({"anyOf": [], "type": "null"})").find("anyOf"), std::string::npos);
  EXPECT_NE(refusal("[]").find("must be an object"), std::string::npos);
}

}  // namespace
}  // namespace tide::test
