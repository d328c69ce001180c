// compile_json_schema: for each schema, random texts of the grammar parse as JSON and validate against the
// schema (an independent validator, grammar_test_util.h), hand-written valid instances in the canonical layout
// are accepted, and invalid texts are rejected.
#include <gtest/gtest.h>

#include "grammar/json_schema.h"
#include "grammar_schema_test_util.h"

namespace tide::test {
namespace {

using grammar::compile_json_schema;
using grammar::JsonSchemaOptions;

struct Case {
  Json schema;
  std::vector<Json> valid;          // written in the canonical layout: each must be accepted
  std::vector<std::string> invalid;  // texts the grammar must reject
};

// Samples `n` texts; each must be JSON valid against the schema. Returns the distinct texts seen.
std::set<std::string> expect_samples_valid(const Grammar& g, const Json& schema, int n, uint32_t seed = 1) {
  Sampler sampler(g);
  SchemaValidator validator(schema);
  std::mt19937 rng(seed);
  std::set<std::string> seen;
  for (int i = 0; i < n; ++i) {
    const std::string text = sampler.sample(rng);
    seen.insert(text);
    Json parsed;
    try {
      parsed = Json::parse(text);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not JSON: " << text << " (" << e.what() << ") schema " << schema.dump();
      continue;
    }
    EXPECT_EQ(validator.check(parsed), "") << text << "\nschema " << schema.dump();
    EXPECT_TRUE(accepts(g, text)) << "the recognizer rejects a sample: " << text;
  }
  return seen;
}

void run_case(const Case& c, const JsonSchemaOptions& options = {}) {
  SCOPED_TRACE(c.schema.dump());
  const Grammar g = compile_json_schema(c.schema, options);
  expect_samples_valid(g, c.schema, 150);
  SchemaValidator validator(c.schema);
  for (const Json& v : c.valid) {
    ASSERT_EQ(validator.check(v), "") << "test data: " << v.dump();
    EXPECT_TRUE(accepts(g, canonical(v))) << canonical(v);
  }
  for (const std::string& text : c.invalid) EXPECT_FALSE(accepts(g, text)) << text;
}

TEST(GrammarSchema, Primitives) {
  run_case({{{"type", "null"}}, {nullptr}, {"nul", "null ", "0", "\"null\""}});
  run_case({{{"type", "boolean"}}, {true, false}, {"True", "1", "null"}});
  run_case({{{"type", "integer"}}, {0, -1, 42, 1234567890123LL}, {"01", "-0", "1.0", "1e3", "+1", "- 1", ""}});
  run_case({{{"type", "number"}}, {0, -1.5, 3.25, 1e10, Json::parse("2.5e-7"), 100},
            {"01", ".5", "1.", "1e", "--1", "1.5.2", "0x10", "NaN", "Infinity"}});
  run_case({{{"type", "string"}}, {"", "plain", "quote \" backslash \\ slash /", "tab\tnewline\n", "\u00e9\u4e2d\U0001F600"},
            {"abc", "\"abc", "\"a\"b\"", "\"\\x\"", "\"\\u12\"", "\"\t\"", "\"\\ud800\""}});
}

TEST(GrammarSchema, StringEscapesEveryForm) {
  const Grammar g = compile_json_schema({{"type", "string"}});
  for (const char* text : {R"("\"")", R"("\\")", R"("\/")", R"("\b")", R"("\f")", R"("\n")", R"("\r")", R"("\t")",
                           R"("\u0041")", R"("\u00e9")", R"("\uFFFF")", R"("\u001F")", "\"\xe2\x80\xa8\""}) {
    EXPECT_TRUE(accepts(g, text)) << text;
  }
  for (const char* text : {R"("\a")", R"("\u00G0")", R"("\uD83D\uDE00")", "\"\x01\"", "\"\x7f\xff\""}) {
    EXPECT_FALSE(accepts(g, text)) << text;
  }
}

TEST(GrammarSchema, TypeLists) {
  run_case({{{"type", {"string", "null"}}}, {"x", nullptr}, {"1", "true"}});
  run_case({{{"type", {"integer", "boolean"}}, {"minimum", 0}}, {1, true}, {"-1", "null", "1.5"}});
}

TEST(GrammarSchema, ObjectsKeepPropertyOrderAndRequired) {
  const Json schema = Json::parse(R"({"type": "object", "properties": {
      "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "email": {"type": "string", "format": "email"}, "tags": {"type": "array", "items": {"type": "string"}}},
      "required": ["name", "age"]})");
  run_case({schema,
            {Json::parse(R"({"name": "Ann", "age": 30})"), Json::parse(R"({"name": "", "age": 0, "tags": []})"),
             Json::parse(R"({"name": "B", "age": 150, "email": "b@x.io", "tags": ["a", "b"]})")},
            {R"({"age": 30, "name": "Ann"})", R"({"name": "Ann"})", R"({"name": "Ann", "age": 151})",
             R"({"name": "Ann", "age": 30, "extra": 1})", R"({"name": "Ann","age": 30})", R"({ "name": "Ann", "age": 30})",
             R"({"name": 1, "age": 30})", R"({"name": "A", "age": 3, "email": "nope"})"}});
}

TEST(GrammarSchema, OptionalPropertiesInAnyCombination) {
  const Json schema = Json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "integer"}, "c": {"type": "integer"}}, "required": ["b"]})");
  const Grammar g = compile_json_schema(schema);
  for (const char* text : {R"({"b": 1})", R"({"a": 1, "b": 2})", R"({"b": 2, "c": 3})", R"({"a": 1, "b": 2, "c": 3})"}) {
    EXPECT_TRUE(accepts(g, text)) << text;
  }
  for (const char* text : {"{}", R"({"a": 1})", R"({"a": 1, "c": 3})", R"({, "b": 1})", R"({"b": 1, })",
                           R"({"b": 1, "a": 2})", R"({"a": 1, "a": 1, "b": 2})"}) {
    EXPECT_FALSE(accepts(g, text)) << text;
  }
  // All optional: the empty object too, and no dangling comma.
  const Grammar none = compile_json_schema(Json::parse(R"({"properties": {"x": {"type": "null"}, "y": {"type": "null"}}})"));
  for (const char* text : {"{}", R"({"x": null})", R"({"y": null})", R"({"x": null, "y": null})"}) {
    EXPECT_TRUE(accepts(none, text)) << text;
  }
  EXPECT_FALSE(accepts(none, R"({, "y": null})"));
}

TEST(GrammarSchema, AdditionalProperties) {
  // true: extra members after the listed ones, with keys that repeat none of them.
  const Json open = Json::parse(R"({"type": "object", "properties": {"id": {"type": "integer"}, "ide": {"type": "null"}},
      "required": ["id"], "additionalProperties": true})");
  run_case({open,
            {Json::parse(R"({"id": 1})"), Json::parse(R"({"id": 1, "x": [1, {"y": null}]})"),
             Json::parse(R"({"id": 1, "i": 2, "idx": 3, "": 4})")},
            {R"({"id": 1, "id": 2})", R"({"id": 1, "ide": 2})", R"({"x": 1})"}});
  // A schema: extra members' values follow it.
  run_case({Json::parse(R"({"type": "object", "additionalProperties": {"type": "integer"}})"),
            {Json::parse(R"({})"), Json::parse(R"({"a": 1, "b\"c": 2})")},
            {R"({"a": "x"})", R"({"a": 1,})"}});
  // false (OpenAI strict): only the listed properties.
  run_case({Json::parse(R"({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
              "additionalProperties": false})"),
            {Json::parse(R"({"a": "x"})")},
            {R"({"a": "x", "b": 1})", R"({})"}});
  // Absent: strict by default where properties are listed, open with strict = false.
  const Json unspecified = Json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}})");
  EXPECT_FALSE(accepts(compile_json_schema(unspecified), R"({"a": 1, "b": 2})"));
  JsonSchemaOptions lax;
  lax.strict = false;
  EXPECT_TRUE(accepts(compile_json_schema(unspecified, lax), R"({"a": 1, "b": 2})"));
  // A required name without a schema of its own takes additionalProperties' schema.
  run_case({Json::parse(R"({"type": "object", "required": ["k"], "additionalProperties": {"type": "boolean"}})"),
            {Json::parse(R"({"k": true})"), Json::parse(R"({"k": false, "z": true})")},
            {R"({})", R"({"k": 1})"}});
}

TEST(GrammarSchema, Arrays) {
  run_case({Json::parse(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4})"),
            {Json::parse("[1, 2]"), Json::parse("[1, 2, 3, 4]")},
            {"[]", "[1]", "[1, 2, 3, 4, 5]", "[1,2]", "[1, 2,]", "[ 1, 2]"}});
  run_case({Json::parse(R"({"type": "array"})"), {Json::parse("[]"), Json::parse(R"([1, "a", [null], {}])")}, {"[,]"}});
  run_case({Json::parse(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]})"),
            {Json::parse("[]"), Json::parse(R"(["a"])"), Json::parse(R"(["a", 1])")},
            {R"(["a", 1, 2])", R"([1])", R"(["a", "b"])"}});
  run_case({Json::parse(R"({"type": "array", "prefixItems": [{"type": "string"}], "items": {"type": "null"},
              "minItems": 2})"),
            {Json::parse(R"(["a", null])"), Json::parse(R"(["a", null, null])")},
            {R"(["a"])", R"(["a", 1])"}});
  run_case({Json::parse(R"({"type": "array", "items": [{"const": 1}, {"const": 2}], "additionalItems": {"type": "string"}})"),
            {Json::parse("[1, 2]"), Json::parse(R"([1, 2, "x"])")},
            {"[2]", "[1, 2, 3]"}});
  run_case({Json::parse(R"({"type": "array", "maxItems": 0})"), {Json::parse("[]")}, {"[1]"}});
  run_case({Json::parse(R"({"type": "array", "items": false})"), {Json::parse("[]")}, {"[1]"}});
}

// Long bounded ranges are built from chunks (O(sqrt n) rules): every length is still exactly in or out.
TEST(GrammarSchema, LongLengthAndCountBoundsAreExact) {
  const Grammar text = compile_json_schema(Json::parse(R"({"type": "string", "minLength": 3, "maxLength": 1000})"));
  EXPECT_LT(text.rules.size(), 200u);
  for (int n = 0; n <= 1010; ++n) {
    EXPECT_EQ(accepts(text, "\"" + std::string(static_cast<size_t>(n), 'a') + "\""), n >= 3 && n <= 1000) << n;
  }
  const Grammar list = compile_json_schema(Json::parse(R"({"type": "array", "items": {"const": 0}, "minItems": 70, "maxItems": 200})"));
  std::string items = "[0";
  for (int n = 1; n <= 210; ++n, items += ", 0") EXPECT_EQ(accepts(list, items + "]"), n >= 70 && n <= 200) << n;
}

TEST(GrammarSchema, EnumAndConst) {
  run_case({Json::parse(R"({"enum": ["red", "green", 3, null, true, [1, {"a": "b"}], {"x": 1.5}]})"),
            {"red", 3, nullptr, Json::parse(R"([1, {"a": "b"}])"), Json::parse(R"({"x": 1.5})")},
            {"\"blue\"", "4", "[1,{\"a\":\"b\"}]"}});
  run_case({Json::parse(R"({"const": "fixed \"quoted\" \u00e9"})"), {"fixed \"quoted\" \u00e9"}, {"\"fixed\""}});
  // Values the type excludes are left out.
  const Grammar g = compile_json_schema(Json::parse(R"({"type": "string", "enum": ["a", 1, "b"]})"));
  EXPECT_TRUE(accepts(g, "\"a\""));
  EXPECT_FALSE(accepts(g, "1"));
}

TEST(GrammarSchema, AnyOfOneOfAllOf) {
  run_case({Json::parse(R"({"anyOf": [{"type": "integer", "minimum": 10}, {"type": "string", "maxLength": 2}]})"),
            {10, 99, "ab"}, {"9", "\"abc\"", "null"}});
  run_case({Json::parse(R"({"oneOf": [{"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
              "required": ["kind", "x"]}, {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]}]})"),
            {Json::parse(R"({"kind": "a", "x": 1})"), Json::parse(R"({"kind": "b"})")},
            {R"({"kind": "a"})", R"({"kind": "c"})"}});
  run_case({Json::parse(R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
              {"properties": {"a": {"minimum": 5}, "b": {"type": "string"}}, "required": ["b"]}]})"),
            {Json::parse(R"({"a": 5, "b": "x"})")},
            {R"({"a": 4, "b": "x"})", R"({"a": 5})"}});
  // Keywords beside anyOf apply to every branch.
  run_case({Json::parse(R"({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
              "anyOf": [{"properties": {"x": {"type": "null"}}, "required": ["x"]}, {"properties": {"y": {"type": "null"}}, "required": ["y"]}]})"),
            {Json::parse(R"({"id": 1, "x": null})"), Json::parse(R"({"id": 1, "y": null})")},
            {R"({"id": 1})", R"({"x": null})"}});
}

TEST(GrammarSchema, RefsAndRecursion) {
  const Json tree = Json::parse(R"({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value", "children"]}},
      "$ref": "#/$defs/node"})");
  run_case({tree,
            {Json::parse(R"({"value": 1, "children": []})"),
             Json::parse(R"({"value": 1, "children": [{"value": 2, "children": [{"value": 3, "children": []}]}]})")},
            {R"({"value": 1})", R"({"value": 1, "children": [{"value": 2}]})"}});
  const Json list = Json::parse(R"({"type": "object", "properties": {"head": {"type": "string"},
      "tail": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["head", "tail"]})");
  run_case({list, {Json::parse(R"({"head": "a", "tail": {"head": "b", "tail": null}})")}, {R"({"head": "a"})"}});
  const Json definitions = Json::parse(R"({"definitions": {"a~b/c": {"type": "integer"}},
      "type": "array", "items": {"$ref": "#/definitions/a~0b~1c"}})");
  run_case({definitions, {Json::parse("[1, 2]")}, {R"(["x"])"}});
}

TEST(GrammarSchema, AnyWhitespaceOption) {
  JsonSchemaOptions options;
  options.any_whitespace = true;
  options.max_whitespace = 4;
  const Json schema = Json::parse(R"({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
      "required": ["a"]})");
  const Grammar g = compile_json_schema(schema, options);
  for (const char* text : {R"({"a":[1,2]})", R"({"a": [1, 2]})", "{\n  \"a\" : [ 1 ,\n\t2 ]\n}", R"({"a":[]})"}) {
    EXPECT_TRUE(accepts(g, text)) << text;
  }
  for (const char* text : {" {\"a\":[]}", "{\"a\":[]} ", "{     \"a\":[]}", "{\"a\":[1 2]}"}) {
    EXPECT_FALSE(accepts(g, text)) << text;
  }
  expect_samples_valid(g, schema, 100);
}

TEST(GrammarSchema, AnyJsonIsAnyObject) {
  const Grammar g = grammar::any_json();
  for (const char* text : {"{}", R"({"a": 1})", R"({"a": [1, 2.5e3, "x", null, true, false, {"b": {}}], "a": -0.5})"}) {
    EXPECT_TRUE(accepts(g, text)) << text;
  }
  for (const char* text : {"[]", "1", "\"x\"", "{\"a\"}", "{\"a\": 1,}", "{'a': 1}"}) EXPECT_FALSE(accepts(g, text)) << text;
  const std::set<std::string> seen = expect_samples_valid(g, Json::parse(R"({"type": "object"})"), 300);
  EXPECT_GT(seen.size(), 100u);  // the sampler explores: not one text over and over
}

}  // namespace
}  // namespace tide::test
