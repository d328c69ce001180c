// Integer and number bounds: exact range grammars, checked value by value against exact decimal comparison.
#include <gtest/gtest.h>

#include "grammar/json_schema.h"
#include "grammar_schema_test_util.h"

namespace tide::test {
namespace {

using grammar::compile_json_schema;

// A decimal text (no exponent, at most 6 fraction digits) as an exact integer count of millionths.
int64_t micros(const std::string& text) {
  const bool negative = text[0] == '-';
  const std::string body = text.substr(negative ? 1 : 0);
  const size_t dot = body.find('.');
  std::string whole = body.substr(0, dot), fraction = dot == std::string::npos ? "" : body.substr(dot + 1);
  fraction.resize(6, '0');
  const int64_t value = std::stoll(whole) * 1000000 + std::stoll(fraction);
  return negative ? -value : value;
}

struct Range {
  std::string schema;  // the bound keywords, as JSON text
  std::optional<int64_t> lo, hi;  // in millionths
  bool lo_exclusive = false, hi_exclusive = false;
  bool in(int64_t v) const {
    return (!lo || (lo_exclusive ? v > *lo : v >= *lo)) && (!hi || (hi_exclusive ? v < *hi : v <= *hi));
  }
};

const std::vector<Range> kIntegerRanges = {
    {R"("minimum": 0, "maximum": 150)", 0, 150'000'000},
    {R"("minimum": -37, "maximum": 1234)", -37'000'000, 1234'000'000},
    {R"("minimum": 5, "maximum": 5)", 5'000'000, 5'000'000},
    {R"("minimum": -100, "maximum": -7)", -100'000'000, -7'000'000},
    {R"("minimum": 10, "maximum": 99)", 10'000'000, 99'000'000},
    {R"("minimum": 99, "maximum": 1001)", 99'000'000, 1001'000'000},
    {R"("minimum": -5)", -5'000'000, std::nullopt},
    {R"("minimum": 1)", 1'000'000, std::nullopt},
    {R"("maximum": 42)", std::nullopt, 42'000'000},
    {R"("maximum": -42)", std::nullopt, -42'000'000},
    {R"("exclusiveMinimum": 0, "exclusiveMaximum": 100)", 0, 100'000'000, true, true},
    {R"("minimum": 2.5, "maximum": 7.5)", 2'500'000, 7'500'000},
    {R"("minimum": -2.5, "exclusiveMaximum": 3)", -2'500'000, 3'000'000, false, true},
    {R"("minimum": 0, "exclusiveMinimum": true, "maximum": 10)", 0, 10'000'000, true, false},  // draft 4
    {R"("minimum": 3, "exclusiveMinimum": 3)", 3'000'000, std::nullopt, true, false},
};

TEST(GrammarSchemaNumber, IntegerRangesAreExact) {
  for (const Range& range : kIntegerRanges) {
    SCOPED_TRACE(range.schema);
    const Grammar g = compile_json_schema(Json::parse(R"({"type": "integer", )" + range.schema + "}"));
    const int64_t from = (range.lo ? *range.lo / 1000000 : (range.hi ? *range.hi / 1000000 : 0)) - 150;
    const int64_t to = (range.hi ? *range.hi / 1000000 : from + 300) + 150;
    for (int64_t v = from; v <= to; ++v) {
      EXPECT_EQ(accepts(g, std::to_string(v)), range.in(v * 1000000)) << v;
    }
    for (int64_t v : {int64_t{123456789}, int64_t{-987654321}, int64_t{1000000000000}}) {
      EXPECT_EQ(accepts(g, std::to_string(v)), range.in(v * 1000000)) << v;
    }
    EXPECT_FALSE(accepts(g, "1.0"));
    EXPECT_FALSE(accepts(g, "007"));
    EXPECT_FALSE(accepts(g, "-0"));
  }
}

TEST(GrammarSchemaNumber, WideIntegerRange) {
  const Grammar g = compile_json_schema(Json::parse(R"({"type": "integer", "minimum": -1000000007, "maximum": 9000000000000})"));
  std::mt19937_64 rng(7);
  for (int i = 0; i < 3000; ++i) {
    const int64_t v = std::uniform_int_distribution<int64_t>(-2000000000, 10000000000000)(rng);
    EXPECT_EQ(accepts(g, std::to_string(v)), v >= -1000000007 && v <= 9000000000000) << v;
  }
  for (int64_t v : {int64_t{-1000000007}, int64_t{-1000000008}, int64_t{9000000000000}, int64_t{9000000000001}}) {
    EXPECT_EQ(accepts(g, std::to_string(v)), v >= -1000000007 && v <= 9000000000000) << v;
  }
}

const std::vector<Range> kNumberRanges = {
    {R"("minimum": 0, "maximum": 1)", 0, 1'000'000},
    {R"("exclusiveMinimum": 0, "exclusiveMaximum": 1)", 0, 1'000'000, true, true},
    {R"("minimum": -1.5, "maximum": 2.25)", -1'500'000, 2'250'000},
    {R"("minimum": 0.1, "maximum": 0.35)", 100'000, 350'000},
    {R"("exclusiveMinimum": 0.05, "maximum": 0.0501)", 50'000, 50'100, true, false},
    {R"("minimum": -3.75, "exclusiveMaximum": -1.5)", -3'750'000, -1'500'000, false, true},
    {R"("minimum": 100)", 100'000'000, std::nullopt},
    {R"("maximum": -0.001)", std::nullopt, -1'000},
    {R"("minimum": 0.001, "maximum": 500)", 1'000, 500'000'000},
    {R"("minimum": 12.5, "maximum": 12.75)", 12'500'000, 12'750'000},
    {R"("exclusiveMinimum": -0.5, "exclusiveMaximum": 0.5)", -500'000, 500'000, true, true},
    {R"("minimum": 7, "maximum": 7)", 7'000'000, 7'000'000},
    {R"("minimum": 1e-3, "maximum": 2e2)", 1'000, 200'000'000},
};

// Millionths as decimal text, with its trailing zeros (and the point, when all are) dropped.
std::string decimal_text(int64_t v) {
  std::string text = (v < 0 ? "-" : "") + std::to_string(std::abs(v) / 1000000) + "." +
                     std::to_string(1000000 + std::abs(v) % 1000000).substr(1);
  while (text.back() == '0') text.pop_back();
  if (text.back() == '.') text.pop_back();
  return text;
}

// Decimal texts near `center`: every other one within a few hundred millionths of it (narrow ranges get hits).
std::string random_decimal(std::mt19937& rng, int64_t center) {
  if (std::uniform_int_distribution<int>(0, 1)(rng)) {
    return decimal_text(center + std::uniform_int_distribution<int64_t>(-300, 300)(rng));
  }
  const int64_t whole_center = std::abs(center) / 1000000;
  const int64_t whole = std::max<int64_t>(0, whole_center + std::uniform_int_distribution<int64_t>(-3, 3)(rng));
  std::string text = (std::uniform_int_distribution<int>(0, 1)(rng) ? "-" : "") + std::to_string(whole);
  const int fraction_digits = std::uniform_int_distribution<int>(0, 5)(rng);
  if (fraction_digits > 0) {
    text += '.';
    for (int i = 0; i < fraction_digits; ++i) text += static_cast<char>('0' + std::uniform_int_distribution<int>(0, 9)(rng));
  }
  return text;
}

TEST(GrammarSchemaNumber, NumberRangesAreExactForDecimals) {
  std::mt19937 rng(11);
  for (const Range& range : kNumberRanges) {
    SCOPED_TRACE(range.schema);
    const Json schema = Json::parse(R"({"type": "number", )" + range.schema + "}");
    const Grammar g = compile_json_schema(schema);
    int accepted = 0;
    for (int i = 0; i < 4000; ++i) {
      const int64_t center = i % 2 ? range.lo.value_or(range.hi.value_or(0)) : range.hi.value_or(range.lo.value_or(0));
      const std::string text = random_decimal(rng, center);
      if (micros(text) == 0 && text[0] == '-') continue;  // "-0...": valid, never written by the grammar
      const bool expected = range.in(micros(text));
      EXPECT_EQ(accepts(g, text), expected) << text;
      accepted += expected;
    }
    EXPECT_GT(accepted, 20);
    // The bounds themselves, spelled with trailing zeros.
    for (const auto& [bound, exclusive] : {std::pair{range.lo, range.lo_exclusive}, std::pair{range.hi, range.hi_exclusive}}) {
      if (!bound) continue;
      const int64_t b = *bound;
      std::string text = (b < 0 ? "-" : "") + std::to_string(std::abs(b) / 1000000) + "." +
                         std::to_string(1000000 + std::abs(b) % 1000000).substr(1);
      if (b == 0) text = "0.000000";
      EXPECT_EQ(accepts(g, text), !exclusive) << text;
    }
    SchemaValidator validator(schema);
    Sampler sampler(g);
    for (int i = 0; i < 200; ++i) {
      const std::string text = sampler.sample(rng);
      EXPECT_EQ(validator.check(Json::parse(text)), "") << text;
    }
  }
}

TEST(GrammarSchemaNumber, UnboundedNumbersTakeFractionsAndExponents) {
  const Grammar g = compile_json_schema(Json::parse(R"({"type": "number"})"));
  for (const char* text : {"0", "-0", "-0.0", "1.5", "1e5", "1E5", "-2.5e-10", "3.0E+99", "123456789012345678901234567890"}) {
    EXPECT_TRUE(accepts(g, text)) << text;
  }
  // An exponent has at most two digits, so that every number written fits a double.
  for (const char* text : {"1e100", "1e", "1.e5", "+1", "01.5", "1.5e+-3"}) EXPECT_FALSE(accepts(g, text)) << text;
}

TEST(GrammarSchemaNumber, RefusedBounds) {
  for (const char* schema : {R"({"type": "integer", "minimum": 5, "maximum": 4})",
                             R"({"type": "integer", "minimum": 2.1, "maximum": 2.9})",
                             R"({"type": "number", "exclusiveMinimum": 1, "exclusiveMaximum": 1})",
                             R"({"type": "number", "minimum": "1"})",
                             R"({"type": "number", "minimum": 1e300})"}) {
    EXPECT_THROW(compile_json_schema(Json::parse(schema)), grammar::GrammarError) << schema;
  }
  try {
    compile_json_schema(Json::parse(R"({"properties": {"n": {"type": "integer", "minimum": 3, "maximum": 1}}})"));
    FAIL();
  } catch (const grammar::GrammarError& e) {
    EXPECT_STREQ(e.what(), "JSON Schema: no integer meets the bounds at /properties/n");
  }
}

}  // namespace
}  // namespace tide::test
