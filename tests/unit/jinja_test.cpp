// tide's Jinja2 interpreter against Python jinja2: tests/fixtures/jinja_cases.json holds templates, variables
// and what jinja2 (configured as transformers configures it) rendered or raised; tools/chat/jinja_cases.py
// regenerates it. Plus what Python cannot give a fixed answer for: limits on hostile templates, error
// positions, strftime_now.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/jinja/jinja_strings.h"
#include "chat/jinja/jinja_template.h"
#include "chat/json_exact.h"
#include "core/error.h"

namespace tide::jinja {
namespace {

using Json = nlohmann::ordered_json;

struct JinjaCase {
  std::string name;
  Json data;
};

// The cases, read exactly: integers beyond 64 bits stay integers, as Python wrote them.
std::vector<JinjaCase> load_cases() {
  std::ifstream file(std::string(TIDE_FIXTURES_DIR) + "/jinja_cases.json");
  if (!file) return {};
  std::ostringstream text;
  text << file.rdbuf();
  const Json root = parse_json_exact(text.str(), 1000);
  std::vector<JinjaCase> cases;
  for (const Json& entry : root["cases"]) cases.push_back({entry["name"].get<std::string>(), entry});
  return cases;
}

Dict variables_of(const Json& vars) {
  const Value value = from_json(vars);
  return value.as_dict();
}

std::string render(std::string_view source, const Json& vars = Json::object(), const RenderLimits& limits = {}) {
  return Template(source).render(variables_of(vars), limits);
}

// Runs `fn` expecting tide::Error; returns its message.
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected tide::Error";
  return "";
}

class JinjaFixture : public ::testing::TestWithParam<JinjaCase> {};

TEST_P(JinjaFixture, MatchesPythonJinja2) {
  const Json& c = GetParam().data;
  const std::string source = c["template"].get<std::string>();
  SCOPED_TRACE("template: " + source);
  if (c.contains("tide_divergence")) {  // jinja2 renders it; tide deliberately refuses (the reason is in the case)
    error_of([&] { render(source, c["vars"]); });
    return;
  }
  if (c.contains("expected")) {
    std::string rendered;
    ASSERT_NO_THROW(rendered = render(source, c["vars"])) << "jinja2 rendered: " << c["expected"].get<std::string>();
    EXPECT_EQ(rendered, c["expected"].get<std::string>());
    return;
  }
  const std::string message = error_of([&] { render(source, c["vars"]); });
  SCOPED_TRACE("jinja2 raised " + c["error_type"].get<std::string>() + ": " + c["error"].get<std::string>());
  if (c.value("exact_error", false)) {
    EXPECT_EQ(message, c["error"].get<std::string>());
  }
  if (c.contains("error_line") && c["error_line"].is_number()) {
    EXPECT_NE(message.find(fmt::format("syntax error at line {},", c["error_line"].get<int>())), std::string::npos)
        << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Python, JinjaFixture, ::testing::ValuesIn(load_cases()),
                         [](const ::testing::TestParamInfo<JinjaCase>& info) { return info.param.name; });

TEST(JinjaFixtureFile, HasManyCases) {
  const std::vector<JinjaCase> cases = load_cases();
  EXPECT_GE(cases.size(), 240u);
  EXPECT_GE(std::count_if(cases.begin(), cases.end(), [](const JinjaCase& c) { return c.name.rfind("bigint_", 0) == 0; }),
            20);
}

// --- errors and positions ---

TEST(JinjaErrors, SyntaxErrorNamesLineAndColumn) {
  const std::string message = error_of([] { Template("first line\n  {{ 1 + }}"); });
  EXPECT_NE(message.find("line 2, column 10"), std::string::npos) << message;
}

TEST(JinjaErrors, RuntimeErrorNamesLine) {
  const std::string message = error_of([] { render("a\nb\n{{ 1 + 'x' }}"); });
  EXPECT_NE(message.find("line 3"), std::string::npos) << message;
  EXPECT_NE(message.find("unsupported operand type(s) for +: 'int' and 'str'"), std::string::npos) << message;
}

TEST(JinjaErrors, UnknownFilterIsASyntaxErrorEvenUnused) {
  const std::string message = error_of([] { Template("{% if false %}{{ x|nope }}{% endif %}"); });
  EXPECT_NE(message.find("no filter named 'nope'"), std::string::npos) << message;
}

TEST(JinjaErrors, RaiseExceptionMessageIsExact) {
  EXPECT_EQ(error_of([] { render("{{ raise_exception('Bad: ' ~ x) }}", Json{{"x", 1}}); }), "Bad: 1");
}

TEST(JinjaErrors, UnsupportedTagsAreNamed) {
  for (const char* source : {"{% include 'x' %}", "{% extends 'x' %}", "{% import 'x' as y %}"}) {
    EXPECT_NE(error_of([&] { Template{source}; }).find("is not supported"), std::string::npos) << source;
  }
  EXPECT_NE(error_of([] { Template("{% for x in y recursive %}{% endfor %}"); }).find("recursive"), std::string::npos);
}

// --- hostile templates: every one ends in a clear tide::Error, quickly ---

TEST(JinjaLimits, InfiniteMacroRecursion) {
  const std::string message = error_of([] { render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"); });
  EXPECT_NE(message.find("nested deeper"), std::string::npos) << message;
}

TEST(JinjaLimits, ExponentialMacroCalls) {
  const std::string source =
      "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}";
  RenderLimits limits;
  limits.max_work = 2'000'000;
  const std::string message = error_of([&] { render(source, Json::object(), limits); });
  EXPECT_NE(message.find("more work than the limit"), std::string::npos) << message;
}

TEST(JinjaLimits, NestedLoopsHitTheWorkBudget) {
  RenderLimits limits;
  limits.max_work = 1'000'000;
  const std::string source = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
  EXPECT_NE(error_of([&] { render(source, Json::object(), limits); }).find("more work"), std::string::npos);
}

TEST(JinjaLimits, OutputSize) {
  RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  const std::string source = "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}";
  EXPECT_NE(error_of([&] { render(source, Json::object(), limits); }).find("longer than the limit"), std::string::npos);
}

TEST(JinjaLimits, StringDoubling) {
  const std::string source =
      "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length "
      "}}";
  RenderLimits limits;
  limits.max_output_bytes = 1 << 20;
  EXPECT_NE(error_of([&] { render(source, Json::object(), limits); }).find("longer than the limit"), std::string::npos);
}

TEST(JinjaLimits, StringRepeat) {
  EXPECT_NE(error_of([] { render("{{ 'x' * 1000000000000 }}"); }).find("longer than the limit"), std::string::npos);
}

TEST(JinjaLimits, DeepParserNesting) {
  const std::string source = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_NE(error_of([&] { Template{source}; }).find("nesting deeper"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  EXPECT_NE(error_of([&] { Template{blocks}; }).find("nesting deeper"), std::string::npos);
}

TEST(JinjaLimits, DeepValueNesting) {
  const std::string source =
      "{% set ns = namespace(v=[]) %}{% for i in range(5000) %}{% set ns.v = [ns.v] %}{% endfor %}{{ ns.v }}";
  EXPECT_NE(error_of([&] { render(source); }).find("nested deeper"), std::string::npos);
}

TEST(JinjaLimits, NamespaceCycleStillPrints) {
  const std::string out = render("{% set ns = namespace(x=1) %}{% set ns.x = [ns] %}{{ ns }}");
  EXPECT_NE(out.find("<Namespace {...}>"), std::string::npos) << out;
}

TEST(JinjaLimits, RangeIsCapped) {
  EXPECT_NE(error_of([] { render("{{ range(0, 1000000)|length }}"); }).find("MAX_RANGE"), std::string::npos);
}

// --- behaviour Python cannot pin down in a fixture ---

// Python turns any float into an exact (big) integer; tide's integers are 64-bit, so a float beyond them is a
// template error where a conversion would otherwise be undefined behaviour (found by fuzz/chat_template).
TEST(JinjaLimits, FloatsBeyond64BitIntegersAreErrors) {
  for (const char* source : {"{{ 1e100|int }}", "{{ '-1e19'|int }}", "{{ '%d' % 1e300 }}", "{{ '%x' % (0.0 * 1e400) }}",
                             "{{ 9223372036854775807|round(-1) }}", "{{ 'abc'|center(1e30) }}"}) {
    EXPECT_NE(error_of([&] { render(source); }).find("64-bit integer"), std::string::npos) << source;
  }
  EXPECT_EQ(render("{{ 9.2e18|int }} {{ -9.2e18|int }} {{ '%d' % -3.9 }}"),
            "9200000000000000000 -9200000000000000000 -3");
}

// str.format's field indexes beyond int64 are template errors (they threw std::out_of_range from std::stoul;
// found by fuzz/chat_template).
TEST(JinjaLimits, HugeFormatIndexesAreErrors) {
  for (const char* source : {"{{ '{99999999999999999999}'.format('a') }}", "{{ '{0[99999999999999999999]}'.format([1]) }}"}) {
    EXPECT_NE(error_of([&] { render(source); }).find("out of range"), std::string::npos) << source;
  }
  EXPECT_EQ(render("{{ '{1}{0[1]}'.format([5, 6], 'x') }}"), "x6");
}

TEST(JinjaGlobals, StrftimeNow) {
  const std::string year = render("{{ strftime_now('%Y') }}");
  EXPECT_TRUE(std::regex_match(year, std::regex("[0-9]{4}"))) << year;
  const std::string date = render("{{ strftime_now('%d %B %Y') }}");
  EXPECT_TRUE(std::regex_match(date, std::regex("[0-9]{2} [A-Za-z]+ [0-9]{4}"))) << date;
}

TEST(JinjaTemplate, RendersConcurrently) {
  const Template compiled("{% for m in messages %}{{ m|upper }}{% endfor %}");
  const Dict vars = variables_of(Json{{"messages", {"a", "b", "c"}}});
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(8);
  for (size_t t = 0; t < outputs.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) outputs[t] = compiled.render(vars);
    });
  }
  for (auto& thread : threads) thread.join();
  for (const std::string& out : outputs) EXPECT_EQ(out, "ABC");
}

TEST(JinjaStrings, FloatRepr) {
  EXPECT_EQ(py_float_repr(1.0), "1.0");
  EXPECT_EQ(py_float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(py_float_repr(1e16), "1e+16");
  EXPECT_EQ(py_float_repr(1e-5), "1e-05");
  EXPECT_EQ(py_float_repr(123456789012345.6), "123456789012345.6");
  EXPECT_EQ(py_float_repr(-0.0), "-0.0");
  EXPECT_EQ(py_float_repr(5e-324), "5e-324");
}

TEST(JinjaStrings, InvalidUtf8PassesThrough) {
  const std::string bytes = "a\xff\xfe b";
  EXPECT_EQ(encode_utf8(decode_utf8(bytes)), bytes);
  EXPECT_EQ(render("{{ s }}|{{ s|length }}", Json{{"s", "ok"}}), "ok|2");
}

}  // namespace
}  // namespace tide::jinja
