// Integers beyond 64 bits in tide's Jinja values: what Python cannot pin down in a fixture (tide's float
// fallback for arithmetic, the mapping from JSON) and the exact comparisons between ints and floats. Printing,
// tojson, ordering and the tests are checked against Python in jinja_cases.json (the bigint_* cases).
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "chat/jinja/jinja_bigint.h"
#include "chat/jinja/jinja_template.h"
#include "chat/json_exact.h"
#include "core/error.h"

namespace tide::jinja {
namespace {

using Json = nlohmann::ordered_json;

std::string render(std::string_view source, const Json& vars) {
  return Template(source).render(from_json(vars).as_dict());
}

TEST(JinjaBigInt, FromJson) {
  EXPECT_TRUE(from_json(Json(UINT64_MAX)).is_big_int());
  EXPECT_EQ(from_json(Json(UINT64_MAX)).big_int_text(), "18446744073709551615");
  EXPECT_TRUE(from_json(Json(uint64_t{INT64_MAX})).is_int());
  const Value big = from_json(make_big_integer("-123456789012345678901234567890"));
  ASSERT_TRUE(big.is_big_int());
  EXPECT_EQ(big.str(), "-123456789012345678901234567890");
  EXPECT_EQ(big.type_name(), "int");
  EXPECT_THROW(from_json(Json::binary({1, 2, 3})), Error);  // a binary value that is not a big integer
  EXPECT_THROW(from_json(Json::binary({'1'}, 7)), Error);
}

TEST(JinjaBigInt, ConstructionIsCanonical) {
  EXPECT_EQ(Value::big_integer("-0009223372036854775809").big_int_text(), "-9223372036854775809");
  EXPECT_TRUE(Value::big_integer("0009223372036854775807").is_int());  // fits: an ordinary int
  EXPECT_EQ(Value::big_integer("-9223372036854775808").as_int(), INT64_MIN);
  EXPECT_EQ(Value::big_integer("-0").as_int(), 0);
  for (const char* text : {"", "-", "1.0", "1e30", "+5", "12 "}) EXPECT_THROW(Value::big_integer(text), RuntimeError);
  EXPECT_THROW(Value::big_integer("99999999999999999999").as_int(), RuntimeError);
}

// Python would stay exact; tide converts a big int to float for arithmetic, and refuses where even a double
// cannot hold it.
TEST(JinjaBigInt, ArithmeticFallsBackToFloat) {
  const Json vars = {{"b", make_big_integer("18446744073709551617")}, {"h", make_big_integer("1" + std::string(400, '0'))}};
  EXPECT_EQ(render("{{ b + 1 }} {{ b * 2 }} {{ b - b }} {{ b / 2 }} {{ b // 3 }}", vars),
            "1.8446744073709552e+19 3.6893488147419103e+19 0.0 9.223372036854776e+18 6.148914691236517e+18");
  EXPECT_THROW(render("{{ h + 1 }}", vars), Error);
  EXPECT_THROW(render("{{ 'ab' * b }}", vars), Error);
  EXPECT_THROW(render("{{ [1, 2][b] }}{{ range(b) }}", vars), Error);
  EXPECT_THROW(render("{{ '%x' % b }}", vars), Error);
}

TEST(JinjaBigInt, ExactComparisonsWithFloats) {
  const Value two53_plus_1 = Value::integer((int64_t{1} << 53) + 1);
  const Value two53 = Value::real(9007199254740992.0);
  EXPECT_FALSE(equals(two53_plus_1, two53));  // Python: 2**53 + 1 != 2.0**53
  EXPECT_GT(compare(two53_plus_1, two53), 0);
  const Value p64 = Value::big_integer("18446744073709551616");
  EXPECT_TRUE(equals(p64, Value::real(18446744073709551616.0)));
  EXPECT_EQ(hash_key(p64), hash_key(Value::real(18446744073709551616.0)));  // equal values, one dict key
  EXPECT_EQ(compare_numbers(p64, Value::real(std::nan(""))), std::nullopt);
  EXPECT_EQ(compare_numbers(p64, Value::real(INFINITY)), -1);
  EXPECT_EQ(compare_numbers(Value::real(-INFINITY), Value::big_integer("-1" + std::string(400, '0'))), -1);
  EXPECT_EQ(compare_numbers(Value::big_integer("18446744073709551617"), Value::real(18446744073709551616.5)), 1);
  EXPECT_EQ(hash_key(Value::real(-0.0)), hash_key(Value::integer(0)));
}

// The whole path of a request: parse_json_exact keeps the digits, the template prints them.
TEST(JinjaBigInt, ChatTemplateToolsPrintExactly) {
  const ChatTemplate chat("{{ tools|tojson }}|{{ tools[0].function.parameters.properties.n.maximum }}|"
                          "{{ documents[0].views }}",
                          nlohmann::json::object());
  ChatTemplateInputs inputs;
  const Json body = parse_json_exact(
      R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"n":
         {"maximum": 18446744073709551617, "minimum": -99999999999999999999999}}}}}],
         "documents": [{"views": 18446744073709551615}]})",
      64);
  inputs.tools = body["tools"];
  inputs.documents = body["documents"];
  EXPECT_EQ(chat.render(inputs),
            R"([{"type": "function", "function": {"name": "f", "parameters": {"properties": {"n": {"maximum": )"
            R"(18446744073709551617, "minimum": -99999999999999999999999}}}}}]|18446744073709551617|18446744073709551615)");
}

}  // namespace
}  // namespace tide::jinja
