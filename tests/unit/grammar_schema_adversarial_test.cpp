// Adversarial schemas (deep nesting, long enums, unicode and escapes in keys and values, exponents, recursion,
// nested anyOf), random schemas of the supported subset, hostile sizes, and the compile time of a ~50-property
// schema (printed, not asserted).
#include <gtest/gtest.h>

#include <chrono>

#include "grammar/json_schema.h"
#include "grammar_schema_test_util.h"

namespace tide::test {
namespace {

using grammar::compile_json_schema;
using grammar::GrammarError;

void expect_samples_valid(const Json& schema, int n, uint32_t seed, bool recognize = true) {
  const Grammar g = compile_json_schema(schema);
  Sampler sampler(g);
  SchemaValidator validator(schema);
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) {
    const std::string text = sampler.sample(rng, 16);
    Json parsed;
    try {
      parsed = Json::parse(text);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not JSON: " << text << "\nschema " << schema.dump();
      continue;
    }
    EXPECT_EQ(validator.check(parsed), "") << text << "\nschema " << schema.dump();
    if (recognize && i < 5) {
      EXPECT_TRUE(accepts(g, text)) << text;
    }
  }
}

TEST(GrammarSchemaAdversarial, DeepNesting) {
  Json schema = {{"type", "integer"}};
  Json array = {{"type", "integer"}};
  for (int i = 0; i < 40; ++i) {
    schema = {{"type", "object"}, {"properties", {{"n" + std::to_string(i), schema}}}, {"required", {"n" + std::to_string(i)}}};
    array = {{"type", "array"}, {"items", array}, {"minItems", 1}, {"maxItems", 2}};
  }
  expect_samples_valid(schema, 20, 1);
  expect_samples_valid(array, 20, 2, /*recognize=*/false);
  Json too_deep = true;
  for (int i = 0; i < 300; ++i) too_deep = {{"type", "array"}, {"items", too_deep}};
  try {
    compile_json_schema(too_deep);
    FAIL();
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("deeper than 128"), std::string::npos) << e.what();
  }
}

TEST(GrammarSchemaAdversarial, LongEnumsWithUnicodeAndEscapes) {
  Json values = Json::array();
  for (int i = 0; i < 3000; ++i) {
    values.push_back("v" + std::to_string(i) + (i % 3 == 0 ? "\"q\\" : i % 3 == 1 ? "\u00e9\u4e2d" : "\n\t\x01"));
  }
  values.push_back(1.5e-300);
  values.push_back(Json::parse(R"({"nested": ["\u2028", -0.0]})"));
  const Json schema = {{"enum", values}};
  const Grammar g = compile_json_schema(schema);
  for (size_t i = 0; i < values.size(); i += 97) EXPECT_TRUE(accepts(g, canonical(values[i]))) << canonical(values[i]);
  EXPECT_FALSE(accepts(g, "\"v3000\""));
  expect_samples_valid(schema, 100, 3, false);
}

TEST(GrammarSchemaAdversarial, UnicodeKeysAndValues) {
  const Json schema = Json::parse(R"({"type": "object", "properties": {
      "名前": {"type": "string", "maxLength": 4}, "ключ": {"const": "значение"}, "emoji😀": {"enum": ["🎉", "✓"]},
      "quote\"key": {"type": "boolean"}, "back\\slash": {"type": "null"}, "ctrl\u0001\n": {"type": "integer"},
      "": {"type": "number"}}, "required": ["名前", "ключ", "quote\"key", "ctrl\u0001\n"],
      "additionalProperties": {"type": "string", "pattern": "^[a-e]+$"}})");
  expect_samples_valid(schema, 150, 4);
  const Grammar g = compile_json_schema(schema);
  const Json instance = Json::parse(R"({"名前": "日本語", "ключ": "значение", "quote\"key": true, "ctrl\u0001\n": 3,
      "": 2.5e-3, "ключ2": "abe"})");
  EXPECT_TRUE(accepts(g, canonical(instance))) << canonical(instance);
  EXPECT_FALSE(accepts(g, R"({"名前": "日本語", "ключ": "значение", "quote\"key": true, "ctrl\u0001\n": 3, "名前": "x"})"));
}

TEST(GrammarSchemaAdversarial, RecursionAndNestedAnyOf) {
  const Json schema = Json::parse(R"({"$defs": {
      "expr": {"anyOf": [{"type": "number"}, {"$ref": "#/$defs/op"}, {"type": "array", "items": {"$ref": "#/$defs/expr"}, "maxItems": 3}]},
      "op": {"type": "object", "properties": {"op": {"enum": ["+", "-", "*"]}, "args": {"type": "array",
             "items": {"$ref": "#/$defs/expr"}, "minItems": 1, "maxItems": 3}}, "required": ["op", "args"]}},
      "anyOf": [{"$ref": "#/$defs/expr"}, {"anyOf": [{"type": "string", "minLength": 1}, {"type": "null"}]}]})");
  expect_samples_valid(schema, 200, 5);
}

// Random schemas of the supported subset.
class SchemaGenerator {
 public:
  explicit SchemaGenerator(uint32_t seed) : rng_(seed) {}
  Json schema(int depth) {
    const int kind = pick(depth > 2 ? 6 : 10);
    switch (kind) {
      case 0: return {{"type", "null"}};
      case 1: return {{"type", "boolean"}};
      case 2: return integer();
      case 3: return number();
      case 4: return string();
      case 5: return {{"enum", {"a", 1, nullptr, Json::parse(R"({"k": [1.5e10, "\u00e9"]})"), -2.25}}};
      case 6: return object(depth);
      case 7: return {{"type", "array"}, {"items", schema(depth + 1)}, {"minItems", pick(2)}, {"maxItems", 2 + pick(3)}};
      case 8: return {{"anyOf", {schema(depth + 1), schema(depth + 1)}}};
      default: return {{"type", {"string", "null"}}, {"maxLength", 3}};
    }
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  Json integer() {
    Json s = {{"type", "integer"}};
    if (pick(2)) s["minimum"] = pick(200) - 100;
    if (pick(2)) s["maximum"] = s.value("minimum", -100) + pick(1000);
    return s;
  }
  Json number() {
    Json s = {{"type", "number"}};
    if (pick(2)) s[pick(2) ? "minimum" : "exclusiveMinimum"] = (pick(2000) - 1000) / 8.0;
    if (pick(2)) s[pick(2) ? "maximum" : "exclusiveMaximum"] = (s.contains("minimum") ? s["minimum"].get<double>() : 200.0) + 1 + pick(500) / 4.0;
    return s;
  }
  Json string() {
    switch (pick(4)) {
      case 0: return {{"type", "string"}, {"minLength", pick(3)}, {"maxLength", 3 + pick(5)}};
      case 1: return {{"type", "string"}, {"format", std::vector<std::string>{"date", "uuid", "ipv4", "email", "date-time"}[pick(5)]}};
      case 2: return {{"type", "string"}, {"pattern", std::vector<std::string>{"^[a-z]{2,4}$", "x|y\\d", "^\"q\\\\$"}[pick(3)]}};
      default: return {{"type", "string"}, {"enum", {"α", "β\"", "\\γ"}}};
    }
  }
  Json object(int depth) {
    Json s = {{"type", "object"}, {"properties", Json::object()}};
    Json required = Json::array();
    const int n = 1 + pick(5);
    for (int i = 0; i < n; ++i) {
      const std::string name = std::vector<std::string>{"id", "名", "a\"b", "x", "e\\", "longer_name"}[pick(6)] + std::to_string(i);
      s["properties"][name] = schema(depth + 1);
      if (pick(2)) required.push_back(name);
    }
    s["required"] = required;
    const int additional = pick(3);
    if (additional == 0) s["additionalProperties"] = false;
    if (additional == 1) s["additionalProperties"] = {{"type", "integer"}};
    return s;
  }
  std::mt19937 rng_;
};

TEST(GrammarSchemaAdversarial, RandomSchemas) {
  SchemaGenerator generator(17);
  for (int i = 0; i < 300; ++i) {
    const Json schema = generator.schema(0);
    SCOPED_TRACE(schema.dump());
    expect_samples_valid(schema, 20, i, /*recognize=*/i % 10 == 0);
  }
}

TEST(GrammarSchemaAdversarial, HostileSizes) {
  grammar::JsonSchemaOptions small;
  small.max_schema_nodes = 1000;
  Json big = {{"type", "object"}, {"properties", Json::object()}};
  for (int i = 0; i < 999; ++i) big["properties"]["p" + std::to_string(i)] = Json::object();
  EXPECT_NO_THROW(compile_json_schema(big, small));
  big["properties"]["one_more"] = Json::object();
  EXPECT_THROW(compile_json_schema(big, small), GrammarError);
  small.max_enum_values = 10;
  EXPECT_THROW(compile_json_schema(Json::parse(R"({"enum": [1,2,3,4,5,6,7,8,9,10,11]})"), small), GrammarError);
  // $ref fan-out: every definition referenced twice by the next; compiled once each (a rule per target).
  Json defs = Json::object();
  defs["d0"] = {{"type", "integer"}};
  for (int i = 1; i < 60; ++i) {
    const std::string prev = "#/$defs/d" + std::to_string(i - 1);
    defs["d" + std::to_string(i)] = {{"type", "array"}, {"prefixItems", {{{"$ref", prev}}, {{"$ref", prev}}}}};
  }
  const Grammar g = compile_json_schema({{"$defs", defs}, {"$ref", "#/$defs/d59"}});
  EXPECT_LT(g.rules.size(), 2000u);
}

TEST(GrammarSchemaAdversarial, CompileTimeOfFiftyProperties) {
  Json schema = {{"type", "object"}, {"properties", Json::object()}, {"required", Json::array()},
                 {"additionalProperties", false}};
  for (int i = 0; i < 50; ++i) {
    const std::string name = "field_" + std::to_string(i);
    Json prop;
    switch (i % 7) {
      case 0: prop = {{"type", "string"}, {"maxLength", 64}}; break;
      case 1: prop = {{"type", "integer"}, {"minimum", 0}, {"maximum", 100000}}; break;
      case 2: prop = {{"type", "number"}, {"minimum", -1.5}, {"maximum", 99.25}}; break;
      case 3: prop = {{"enum", {"draft", "review", "approved", "rejected", "archived"}}}; break;
      case 4: prop = {{"type", "array"}, {"items", {{"type", "string"}, {"format", "date"}}}, {"maxItems", 10}}; break;
      case 5: prop = {{"type", "object"}, {"properties", {{"x", {{"type", "number"}}}, {"y", {{"type", "boolean"}}}}}, {"required", {"x"}}}; break;
      default: prop = {{"anyOf", {{{"type", "string"}, {"format", "email"}}, {{"type", "null"}}}}};
    }
    schema["properties"][name] = prop;
    if (i % 2 == 0) schema["required"].push_back(name);
  }
  compile_json_schema(schema);  // warm-up
  const auto start = std::chrono::steady_clock::now();
  const int runs = 20;
  size_t rules = 0;
  for (int i = 0; i < runs; ++i) rules = compile_json_schema(schema).rules.size();
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / runs;
  std::printf("[ compile ] 50-property schema: %.3f ms per compile_json_schema, %zu rules\n", ms, rules);
  RecordProperty("compile_ms", std::to_string(ms));
  expect_samples_valid(schema, 20, 9, false);
}

}  // namespace
}  // namespace tide::test
