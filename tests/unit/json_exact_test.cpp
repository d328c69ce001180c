// parse_json_exact / dump_json_exact: request bodies whose integers keep every digit, key order kept, nesting
// bounded, invalid text refused as nlohmann::json::parse refuses it.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "chat/json_exact.h"
#include "core/error.h"

namespace tide {
namespace {

using Json = nlohmann::ordered_json;

std::string nested(const char* open, const char* close, int depth, const std::string& inner = "") {
  std::string text;
  for (int i = 0; i < depth; ++i) text += open;
  text += inner;
  for (int i = 0; i < depth; ++i) text += close;
  return text;
}

TEST(JsonExact, KeepsKeyOrderAndPlainValues) {
  const Json json = parse_json_exact(R"({"zeta": 1, "alpha": [true, null, -2, 2.5, "s"], "mid": {"b": 1, "a": 2}})", 64);
  EXPECT_EQ(json.dump(), R"({"zeta":1,"alpha":[true,null,-2,2.5,"s"],"mid":{"b":1,"a":2}})");
  EXPECT_TRUE(json["alpha"][2].is_number_integer());
  EXPECT_TRUE(json["alpha"][3].is_number_float());
}

TEST(JsonExact, RepeatedKeyKeepsFirstPositionAndLastValue) {
  // Python's json.loads: {"a": 3, "b": 2}.
  EXPECT_EQ(parse_json_exact(R"({"a": 1, "b": 2, "a": 3})", 64).dump(), R"({"a":3,"b":2})");
}

TEST(JsonExact, SixtyFourBitIntegersStayNumbers) {
  const Json json = parse_json_exact("[9223372036854775807, -9223372036854775808, 18446744073709551615]", 64);
  EXPECT_EQ(json[0].get<int64_t>(), INT64_MAX);
  EXPECT_EQ(json[1].get<int64_t>(), INT64_MIN);
  EXPECT_TRUE(json[2].is_number_unsigned());
  EXPECT_EQ(json[2].get<uint64_t>(), UINT64_MAX);
}

TEST(JsonExact, LargerIntegersBecomeBigIntegers) {
  const std::string huge = "1" + std::string(400, '0');  // beyond a double: nlohmann alone refuses the text
  const std::string text = R"({"a": 18446744073709551616, "b": -9223372036854775809, "c": )" + huge + ", \"d\": -" +
                           huge + R"(, "e": [123456789012345678901234567890], "f": 1e5, "g": 0})";
  const Json json = parse_json_exact(text, 64);
  EXPECT_TRUE(is_big_integer(json["a"]));
  EXPECT_EQ(big_integer_text(json["a"]), "18446744073709551616");
  EXPECT_EQ(big_integer_text(json["b"]), "-9223372036854775809");
  EXPECT_EQ(big_integer_text(json["c"]), huge);
  EXPECT_EQ(big_integer_text(json["d"]), "-" + huge);
  EXPECT_EQ(big_integer_text(json["e"][0]), "123456789012345678901234567890");
  EXPECT_TRUE(json["f"].is_number_float());  // an exponent makes a float, as in Python
  EXPECT_FALSE(is_big_integer(json["g"]));
  EXPECT_EQ(dump_json_exact(json), R"({"a":18446744073709551616,"b":-9223372036854775809,"c":)" + huge + ",\"d\":-" +
                                       huge + R"(,"e":[123456789012345678901234567890],"f":100000.0,"g":0})");
}

TEST(JsonExact, DigitsInsideStringsAreText) {
  const std::string digits(400, '7');
  const Json json = parse_json_exact(R"(["\"", ")" + digits + R"(", "\\", 5, ")" + digits + "\", " + digits + "]", 64);
  ASSERT_EQ(json.size(), 6u);
  EXPECT_EQ(json[1].get<std::string>(), digits);
  EXPECT_EQ(json[3].get<int>(), 5);
  EXPECT_EQ(json[4].get<std::string>(), digits);
  EXPECT_EQ(big_integer_text(json[5]), digits);
}

TEST(JsonExact, DepthLimit) {
  EXPECT_NO_THROW(parse_json_exact(nested("[", "]", 64), 64));
  EXPECT_NO_THROW(parse_json_exact(nested("[", "]", 64, "1"), 64));
  EXPECT_THROW(parse_json_exact(nested("[", "]", 65), 64), Error);
  EXPECT_THROW(parse_json_exact(nested("{\"k\":", "}", 65, "1"), 64), Error);
  EXPECT_NO_THROW(parse_json_exact(nested("{\"k\":", "}", 3, "[]"), 4));
  EXPECT_THROW(parse_json_exact(nested("{\"k\":", "}", 4, "[]"), 4), Error);
  EXPECT_NO_THROW(parse_json_exact("7", 0));
  EXPECT_THROW(parse_json_exact("[]", 0), Error);
  try {
    parse_json_exact(nested("[", "]", 100000), 64);  // refused at depth 65, long before the end
    ADD_FAILURE() << "expected an error";
  } catch (const Error& error) {
    EXPECT_STREQ(error.what(), "JSON nests deeper than 64 levels");
  }
}

TEST(JsonExact, InvalidTextThrowsParseErrors) {
  for (const char* text : {"", "{", "[1,]", "{\"a\" 1}", "[1] x", "01", "-", "[1.]", "\"\\x\"", "tru", "[\"\x01\"]"}) {
    EXPECT_THROW(parse_json_exact(text, 64), nlohmann::json::parse_error) << text;
  }
  EXPECT_THROW(parse_json_exact("1e400", 64), nlohmann::json::out_of_range);
  EXPECT_THROW(parse_json_exact("\"\xff\"", 64), nlohmann::json::parse_error);  // invalid UTF-8
}

// A long literal is blanked to the same length before nlohmann reads the text, so positions stay right.
TEST(JsonExact, ErrorPositionsAfterALongLiteral) {
  const auto error_byte = [](auto parse) -> size_t {
    try {
      parse();
    } catch (const nlohmann::json::parse_error& error) {
      return error.byte;
    }
    ADD_FAILURE() << "expected a parse error";
    return 0;
  };
  const std::string tail = ", x]";
  const size_t exact = error_byte([&] { parse_json_exact("[" + std::string(500, '9') + tail, 64); });
  const size_t plain = error_byte([&] { const Json json = Json::parse("[1" + std::string(499, ' ') + tail); });
  EXPECT_EQ(exact, plain);
  EXPECT_GT(exact, 500u);
}

TEST(JsonExact, DumpMatchesNlohmannWithoutBigIntegers) {
  const Json json = parse_json_exact(R"({"a": [1, {"b": []}, {}], "c": "é\n", "d": {"e": null}})", 64);
  EXPECT_EQ(dump_json_exact(json), json.dump());
  EXPECT_EQ(dump_json_exact(json, 2), json.dump(2));
}

TEST(JsonExact, DumpIndentsBigIntegersLikeNumbers) {
  const Json json = parse_json_exact(R"({"a": [18446744073709551616, {}], "b": {"c": -99999999999999999999}})", 64);
  const std::string expected = parse_json_exact(R"({"a": [1, {}], "b": {"c": 2}})", 64).dump(3);
  std::string want = expected;
  want.replace(want.find('1'), 1, "18446744073709551616");
  want.replace(want.find(": 2") + 2, 1, "-99999999999999999999");
  EXPECT_EQ(dump_json_exact(json, 3), want);
  EXPECT_EQ(dump_json_exact(json).find("bytes"), std::string::npos);
  // The same through an unordered nlohmann::json.
  const nlohmann::json plain = json;
  EXPECT_EQ(dump_json_exact(plain), R"({"a":[18446744073709551616,{}],"b":{"c":-99999999999999999999}})");
}

TEST(JsonExact, DumpReplacesInvalidUtf8UnlessStrict) {
  Json json = Json::array({"ok\xff", make_big_integer("123456789012345678901")});
  EXPECT_EQ(dump_json_exact(json), "[\"ok\xEF\xBF\xBD\",123456789012345678901]");
  EXPECT_THROW(dump_json_exact(json, -1, /*replace_invalid_utf8=*/false), nlohmann::json::type_error);
}

TEST(JsonExact, MakeBigIntegerChecksItsText) {
  EXPECT_EQ(big_integer_text(make_big_integer("-123456789012345678901")), "-123456789012345678901");
  for (const char* text : {"", "-", "-0", "012", "1.5", "1e30", "+1", " 1", "12a"}) {
    EXPECT_THROW(make_big_integer(text), Error) << text;
  }
}

}  // namespace
}  // namespace tide
