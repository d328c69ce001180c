// CohereOutputParser: thinking, responses, action blocks and stray markers in Cohere's generation format. Every
// text is also parsed in every split (cohere_output_test_util.h), which must give the same result.
#include <gtest/gtest.h>

#include <random>

#include "chat/cohere_output.h"
#include "chat/cohere_output_detail.h"
#include "cohere_output_test_util.h"

namespace tide {
namespace {

using test::parse_cohere;

ParsedToolCall call(std::string id, std::string name, std::string arguments) {
  return {std::move(id), std::move(name), std::move(arguments)};
}

TEST(CohereOutput, PlanAndSeveralCallsInOneAction) {
  const auto result = parse_cohere(
      "<|START_THINKING|>I will search, then check the weather.<|END_THINKING|><|START_ACTION|>[\n"
      "    {\"tool_call_id\": \"0\", \"tool_name\": \"search\", \"parameters\": {\"query\": \"x\"}},\n"
      "    {\"tool_call_id\": \"1\", \"tool_name\": \"weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}\n"
      "]<|END_ACTION|><|END_OF_TURN_TOKEN|>");
  EXPECT_EQ(result.reasoning, "I will search, then check the weather.");
  EXPECT_EQ(result.content, "");
  EXPECT_EQ(result.tool_calls, (std::vector<ParsedToolCall>{call("0", "search", R"({"query": "x"})"),
                                                            call("1", "weather", R"({"city": "Paris", "days": 3})")}));
  EXPECT_TRUE(result.citations.empty());
}

TEST(CohereOutput, ArgumentsKeepTheirExactText) {
  // Brackets, braces, quotes, backslashes and an <|END_ACTION|> inside strings; unicode; numbers no double holds.
  const std::string arguments =
      R"({"filter": {"tags": ["a]b", "c}d", "say \"hi\"", "back\\slash\\", "<|END_ACTION|> not the end"],)"
      R"( "nested": [[1, 2], {"deep": {"x": null}}]}, "text": "café ☕ 𝄞 \u00e9",)"
      R"( "big": 12345678901234567890123, "exact": 0.10000000000000000000001})";
  const auto result = parse_cohere("<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"find\", "
                                   "\"parameters\":   " + arguments + "  }]<|END_ACTION|>");
  ASSERT_EQ(result.tool_calls.size(), 1u);
  EXPECT_EQ(result.tool_calls[0].arguments, arguments);
  EXPECT_EQ(result.tool_calls[0].name, "find");
  EXPECT_EQ(result.content, "");
}

TEST(CohereOutput, TextBeforeAndAfterBlocks) {
  const auto result = parse_cohere(
      "Sure — één moment. <|START_ACTION|>[{\"tool_name\": \"search\", \"parameters\": {\"q\": \"ß\"}}]"
      "<|END_ACTION|> and after.<|END_OF_TURN_TOKEN|>");
  EXPECT_EQ(result.content, "Sure — één moment.  and after.");
  EXPECT_EQ(result.tool_calls, (std::vector<ParsedToolCall>{call("", "search", R"({"q": "ß"})")}));
}

TEST(CohereOutput, ThinkingThenResponse) {
  const auto result = parse_cohere(
      "<|START_THINKING|>Überlegung: 6 × 7 = 42… ✓<|END_THINKING|><|START_RESPONSE|>The answer is 42."
      "<|END_RESPONSE|><|END_OF_TURN_TOKEN|>");
  EXPECT_EQ(result.reasoning, "Überlegung: 6 × 7 = 42… ✓");
  EXPECT_EQ(result.content, "The answer is 42.");
  EXPECT_TRUE(result.tool_calls.empty());
}

TEST(CohereOutput, ResponseOnly) {
  const auto result = parse_cohere("<|START_RESPONSE|>Bonjour 👋<|END_RESPONSE|>");
  EXPECT_EQ(result.reasoning, "");
  EXPECT_EQ(result.content, "Bonjour 👋");
}

TEST(CohereOutput, NoMarkersIsContent) {
  const std::string text = "Plain text: 1 < 2, <b>bold</b>, <|UNKNOWN_MARKER|>, <| x |>, <co> tags, <E, <|END.";
  const auto result = parse_cohere(text);
  EXPECT_EQ(result.content, text);
  EXPECT_EQ(result.reasoning, "");
}

TEST(CohereOutput, EndOfTurnAndStrayMarkersAreDropped) {
  EXPECT_EQ(parse_cohere("Hello<|END_OF_TURN_TOKEN|>").content, "Hello");
  EXPECT_EQ(parse_cohere("Hello<EOS_TOKEN>").content, "Hello");
  EXPECT_EQ(parse_cohere("<|END_THINKING|>a<|END_RESPONSE|>b<|END_ACTION|>c<|END_OF_TURN_TOKEN|>").content, "abc");
  const auto result = parse_cohere("<|START_RESPONSE|>x<|END_OF_TURN_TOKEN|>");  // no <|END_RESPONSE|>
  EXPECT_EQ(result.content, "x");
}

TEST(CohereOutput, UnclosedThinkingIsReasoning) {
  const auto result = parse_cohere("<|START_THINKING|>still thinking");
  EXPECT_EQ(result.reasoning, "still thinking");
  EXPECT_EQ(result.content, "");
}

TEST(CohereOutput, ThinkingStartedByThePrompt) {
  CohereParseOptions options;
  options.starts_in_thinking = true;
  const auto result = parse_cohere("hmm, ok.<|END_THINKING|><|START_RESPONSE|>Yes.<|END_RESPONSE|>",
                                   CohereFormat::kActions, options);
  EXPECT_EQ(result.reasoning, "hmm, ok.");
  EXPECT_EQ(result.content, "Yes.");
}

TEST(CohereOutput, ActionEndsAnUnclosedThinkingBlock) {
  const auto result = parse_cohere(
      "<|START_THINKING|>plan<|START_ACTION|>[{\"tool_name\": \"a\", \"parameters\": {}}]<|END_ACTION|>");
  EXPECT_EQ(result.reasoning, "plan");
  EXPECT_EQ(result.tool_calls, (std::vector<ParsedToolCall>{call("", "a", "{}")}));
}

TEST(CohereOutput, ParametersAbsentAndIdKinds) {
  const auto result = parse_cohere(
      "<|START_ACTION|>[{\"tool_name\": \"now\"}, {\"tool_call_id\": 3, \"tool_name\": \"b\", \"parameters\": null},"
      " {\"tool_name\": \"c\", \"tool_call_id\": \"x-1\", \"parameters\": {}, \"extra\": [1]}]<|END_ACTION|>");
  EXPECT_EQ(result.tool_calls, (std::vector<ParsedToolCall>{call("", "now", "{}"), call("3", "b", "{}"),
                                                            call("x-1", "c", "{}")}));
  EXPECT_EQ(result.content, "");
}

TEST(CohereOutput, MalformedActionsAreContentUnchanged) {
  const std::vector<std::string> blocks = {
      R"(<|START_ACTION|>[{"tool_name": "x", "parameters": {]}]<|END_ACTION|>)",           // bad JSON
      R"(<|START_ACTION|>[{"tool_name": "x", "parameters": {}},]<|END_ACTION|>)",          // trailing comma
      R"(<|START_ACTION|>{"tool_name": "x", "parameters": {}}<|END_ACTION|>)",             // not a list
      R"(<|START_ACTION|>["search"]<|END_ACTION|>)",                                       // not objects
      R"(<|START_ACTION|>[]<|END_ACTION|>)",                                               // no calls
      R"(<|START_ACTION|>[{"parameters": {"q": 1}}]<|END_ACTION|>)",                       // missing tool_name
      R"(<|START_ACTION|>[{"tool_name": 7, "parameters": {}}]<|END_ACTION|>)",             // name not a string
      R"(<|START_ACTION|>[{"tool_name": "", "parameters": {}}]<|END_ACTION|>)",            // empty name
      R"(<|START_ACTION|>[{"tool_name": "x", "parameters": "{\"q\": 1}"}]<|END_ACTION|>)",  // parameters a string
      R"(<|START_ACTION|>[{"tool_name": "x", "parameters": {}}] trailing<|END_ACTION|>)",  // text after the JSON
      "<|START_ACTION|><|END_ACTION|>",                                                    // empty
  };
  for (const auto& block : blocks) {
    const auto result = parse_cohere("Before. " + block + " After.<|END_OF_TURN_TOKEN|>");
    EXPECT_EQ(result.content, "Before. " + block + " After.") << block;
    EXPECT_TRUE(result.tool_calls.empty()) << block;
  }
}

TEST(CohereOutput, TruncatedActionAtFinish) {
  // Cut inside a string: content, unchanged.
  const std::string cut = R"(<|START_ACTION|>[{"tool_name": "search", "parameters": {"q": "unfinished <|END_ACTION|>)";
  auto result = parse_cohere(cut);
  EXPECT_EQ(result.content, cut);
  EXPECT_TRUE(result.tool_calls.empty());
  // Cut after the list: the list is complete, so it is the calls.
  result = parse_cohere(R"(<|START_ACTION|>[{"tool_name": "search", "parameters": {"q": "done"}}])");
  EXPECT_EQ(result.tool_calls, (std::vector<ParsedToolCall>{call("", "search", R"({"q": "done"})")}));
  EXPECT_EQ(result.content, "");
  // Ended by the end-of-turn token instead of <|END_ACTION|>.
  result = parse_cohere(R"(<|START_ACTION|>[{"tool_name": "s", "parameters": {}}]<|END_OF_TURN_TOKEN|>)");
  EXPECT_EQ(result.tool_calls, (std::vector<ParsedToolCall>{call("", "s", "{}")}));
  EXPECT_EQ(result.content, "");
  // Cut in the middle of the list, then the turn ends: the block is text, the end-of-turn token is dropped.
  result = parse_cohere(R"(<|START_ACTION|>[{"tool_name": "s"<|END_OF_TURN_TOKEN|>)");
  EXPECT_EQ(result.content, R"(<|START_ACTION|>[{"tool_name": "s")");
  // Cut inside the closing marker.
  result = parse_cohere(R"(<|START_ACTION|>[{"tool_name": "s"}]<|END_ACT)");
  EXPECT_EQ(result.content, R"(<|START_ACTION|>[{"tool_name": "s"}]<|END_ACT)");
  EXPECT_TRUE(result.tool_calls.empty());
}

TEST(CohereOutput, ReasoningOffDropsThinking) {
  CohereParseOptions options;
  options.reasoning = false;
  auto result = parse_cohere("<|START_THINKING|>secret plan<|END_THINKING|><|START_RESPONSE|>Answer.<|END_RESPONSE|>",
                             CohereFormat::kActions, options);
  EXPECT_EQ(result.reasoning, "");
  EXPECT_EQ(result.content, "Answer.");
  result = parse_cohere("<|START_THINKING|>plan<|END_THINKING|><|START_ACTION|>[{\"tool_name\": \"a\"}]<|END_ACTION|>",
                        CohereFormat::kActions, options);
  EXPECT_EQ(result.reasoning, "");
  EXPECT_EQ(result.content, "");
  EXPECT_EQ(result.tool_calls.size(), 1u);
}

TEST(CohereOutput, ToolParsingOffKeepsActionsAsText) {
  CohereParseOptions options;
  options.tool_calls = false;
  const std::string action =
      R"(<|START_ACTION|>[{"tool_name": "a", "parameters": {"s": "<|END_ACTION|>"}}]<|END_ACTION|>)";
  const auto result = parse_cohere("<|START_THINKING|>p<|END_THINKING|>" + action + "<|END_OF_TURN_TOKEN|>",
                                   CohereFormat::kActions, options);
  EXPECT_EQ(result.reasoning, "p");
  EXPECT_EQ(result.content, action);
  EXPECT_TRUE(result.tool_calls.empty());
}

TEST(CohereOutput, HoldsBackOnlyWhatMayStillBeAMarker) {
  CohereOutputParser parser(CohereFormat::kActions);
  EXPECT_EQ(parser.feed("Hello <|START_").content, "Hello ");
  EXPECT_EQ(parser.feed("RESP").content, "");
  EXPECT_EQ(parser.feed("ONSE|>Hi <|FOO").content, "Hi <|FOO");  // no known marker starts "<|FOO"
  EXPECT_EQ(parser.feed(" <").content, " ");
  EXPECT_EQ(parser.feed("E").content, "");  // <EOS_TOKEN> starts so
  EXPECT_EQ(parser.feed("X").content, "<EX");
  EXPECT_EQ(parser.feed("<|END_OF_TURN_TOK").content, "");
  const auto last = parser.finish();
  EXPECT_EQ(last.content, "<|END_OF_TURN_TOK");  // never completed: text
  EXPECT_TRUE(parser.feed("more").empty());  // after finish()
}

TEST(CohereOutput, ActionIsHeldUntilItCloses) {
  CohereOutputParser parser(CohereFormat::kActions);
  EXPECT_EQ(parser.feed("Ok. <|START_ACTION|>[{\"tool_name\": \"a\"}").content, "Ok. ");
  EXPECT_FALSE(parser.saw_tool_calls());
  auto delta = parser.feed("]<|END_ACTION|>");
  EXPECT_EQ(delta.tool_calls.size(), 1u);
  EXPECT_TRUE(parser.saw_tool_calls());
  EXPECT_TRUE(parser.finish().empty());
}

TEST(CohereOutput, OversizedActionIsReleasedAsText) {
  CohereParseOptions options;
  options.max_held_bytes = 24;
  // The body passes 24 bytes without closing (inside a string): the opener and 24 bytes, cut back to a whole
  // character (byte 24 is inside an é), are text; what follows is read as text again, where <|END_ACTION|> is a
  // stray marker.
  const std::string body = R"([{"tool_name": "aééééééééé", "parameters": {}}])";
  const auto result = parse_cohere("<|START_ACTION|>" + body + "<|END_ACTION|>", CohereFormat::kActions, options);
  EXPECT_EQ(result.content, "<|START_ACTION|>" + body);
  EXPECT_TRUE(result.tool_calls.empty());
  // A short one still parses.
  EXPECT_EQ(parse_cohere(R"(<|START_ACTION|>[{"tool_name": "a"}]<|END_ACTION|>)", CohereFormat::kActions, options)
                .tool_calls.size(),
            1u);
}

// A long unclosed action, plan and citation span under the default 1 MiB limit, fed in small pieces: each is
// released as text once past the limit, and the parser stays linear (resumes its scans) while it holds them.
TEST(CohereOutput, LongHeldTextUnderTheDefaultLimit) {
  const std::string filler(3 << 19, 'x');  // 1.5 MiB
  const auto feed_in_pieces = [](CohereOutputParser& parser, const std::string& text) {
    test::CohereResult result;
    for (std::size_t i = 0; i < text.size(); i += 16) result.add(parser.feed(std::string_view(text).substr(i, 16)));
    result.add(parser.finish());
    return result;
  };
  CohereOutputParser actions(CohereFormat::kActions);
  const std::string action = "<|START_ACTION|>[\"" + filler + "\"]<|END_ACTION|>";
  EXPECT_EQ(feed_in_pieces(actions, action).content, "<|START_ACTION|>[\"" + filler + "\"]");
  CohereOutputParser legacy(CohereFormat::kLegacyActions);
  const std::string plan = "Plan: " + filler + "\nAction: ```json\n[{\"tool_name\": \"t\"}]\n```";
  const auto planned = feed_in_pieces(legacy, plan);
  EXPECT_EQ(planned.content, "Plan: " + filler + "\n");
  EXPECT_EQ(planned.tool_calls.size(), 1u);
  CohereParseOptions options;
  options.citations = true;
  CohereOutputParser cited(CohereFormat::kActions, options);
  const std::string span = "<co>" + filler + "</co: 0:[1]>";
  const auto result = feed_in_pieces(cited, span);
  EXPECT_EQ(result.content, span);
  EXPECT_TRUE(result.citations.empty());
}

TEST(CohereOutput, ParseActionListDirectly) {
  EXPECT_FALSE(cohere::parse_action_list(std::string(300, '[') + std::string(300, ']')));  // too deep
  EXPECT_FALSE(cohere::parse_action_list(""));
  EXPECT_FALSE(cohere::parse_action_list("[{\"tool_name\": \"a\", \"parameters\": [1]}]"));
  const auto calls = cohere::parse_action_list(
      " [ {\"parameters\": {\"a\": 1}, \"tool_name\": \"x\", \"parameters\": {\"b\": \"}\"}} ] ");
  ASSERT_TRUE(calls);
  ASSERT_EQ(calls->size(), 1u);
  EXPECT_EQ((*calls)[0].arguments, R"({"b": "}"})");  // the last of duplicate keys, as nlohmann keeps it
}

TEST(CohereOutput, FormatOfTemplate) {
  EXPECT_EQ(cohere_format_of_template("{{ '<|START_ACTION|>' }}"), CohereFormat::kActions);
  EXPECT_EQ(cohere_format_of_template("Write 'Action:' followed by a ```json list"), CohereFormat::kLegacyActions);
  EXPECT_EQ(cohere_format_of_template("Action: without a fence"), std::nullopt);
  EXPECT_EQ(cohere_format_of_template("{{ messages }}"), std::nullopt);
}

// Legacy (Command R+) format: "Plan: ..." then "Action: ```json [...] ```".

TEST(CohereLegacy, PlanAndAction) {
  const auto result = test::parse_legacy(
      "Plan: First I will search for the weather in Zürich.\n"
      "Action: ```json\n[\n    {\n        \"tool_name\": \"internet_search\",\n"
      "        \"parameters\": {\"query\": \"weather ```json Zürich\"}\n    }\n]\n```<|END_OF_TURN_TOKEN|>");
  EXPECT_EQ(result.reasoning, "First I will search for the weather in Zürich.");
  EXPECT_EQ(result.content, "");
  EXPECT_EQ(result.tool_calls,
            (std::vector<ParsedToolCall>{call("", "internet_search", R"({"query": "weather ```json Zürich"})")}));
}

TEST(CohereLegacy, ActionWithoutPlan) {
  auto result = test::parse_legacy("Action: ```json\n[{\"tool_name\": \"a\", \"parameters\": {\"x\": [1]}},"
                                   " {\"tool_name\": \"b\"}]\n```");
  EXPECT_EQ(result.tool_calls, (std::vector<ParsedToolCall>{call("", "a", R"({"x": [1]})"), call("", "b", "{}")}));
  EXPECT_EQ(result.content, "");
  EXPECT_EQ(result.reasoning, "");
  result = test::parse_legacy("Let me look that up.\nAction:\n```json\n[{\"tool_name\": \"a\"}]\n```\n");
  EXPECT_EQ(result.content, "Let me look that up.\n\n");
  EXPECT_EQ(result.tool_calls.size(), 1u);
}

TEST(CohereLegacy, WithoutValidActionEverythingIsContent) {
  const std::vector<std::string> texts = {
      "Plan: I will answer directly.\nThe answer is 4.",
      "Plan: x\nAction: ```json\n[{\"parameters\": {}}]\n```",  // missing tool_name
      "Plan: x\nAction: ```json\n[{\"tool_name\": \"a\"",        // truncated
      "The Action: ```json\n[{\"tool_name\": \"a\"}]\n```",      // not at a line start
      "Action: json [{\"tool_name\": \"a\"}]",                   // no fence
      "Plan: x <|START_OF_TURN_TOKEN|> y",                        // an unknown marker
  };
  for (const auto& text : texts) {
    const auto result = test::parse_legacy(text);
    EXPECT_EQ(result.content, text);
    EXPECT_EQ(result.reasoning, "");
    EXPECT_TRUE(result.tool_calls.empty());
  }
  // A dropped marker ends the held plan, which is then content.
  EXPECT_EQ(test::parse_legacy("Plan: done.<|END_OF_TURN_TOKEN|>").content, "Plan: done.");
}

TEST(CohereLegacy, ValidActionAfterAnInvalidOne) {
  const auto result =
      test::parse_legacy("Plan: p\nAction: ```json\n[1]\n```\nAction: ```json\n[{\"tool_name\": \"t\"}]\n```");
  EXPECT_EQ(result.content, "Plan: p\nAction: ```json\n[1]\n```\n");
  EXPECT_EQ(result.tool_calls.size(), 1u);
}

TEST(CohereLegacy, OptionsOff) {
  CohereParseOptions no_reasoning;
  no_reasoning.reasoning = false;
  auto result = test::parse_legacy("Plan: p\nAction: ```json\n[{\"tool_name\": \"t\"}]\n```", no_reasoning);
  EXPECT_EQ(result.reasoning, "");
  EXPECT_EQ(result.content, "");
  EXPECT_EQ(result.tool_calls.size(), 1u);
  CohereParseOptions no_tools;
  no_tools.tool_calls = false;
  const std::string text = "Plan: p\nAction: ```json\n[{\"tool_name\": \"t\"}]\n```";
  result = test::parse_legacy(text, no_tools);
  EXPECT_EQ(result.content, text);
  EXPECT_TRUE(result.tool_calls.empty());
}

TEST(CohereLegacy, HoldsBackLineStartsAndThePlan) {
  CohereOutputParser parser(CohereFormat::kLegacyActions);
  EXPECT_EQ(parser.feed(" ").content, "");  // may still become "Plan:"
  EXPECT_EQ(parser.feed("Hello\nAct").content, " Hello\n");
  EXPECT_EQ(parser.feed("ually no.").content, "Actually no.");
  CohereOutputParser planner(CohereFormat::kLegacyActions);
  EXPECT_TRUE(planner.feed("Plan: look it up.\n").empty());
  EXPECT_TRUE(planner.feed("Action: ```json\n[{\"tool_name\": \"t\"}]\n").empty());
  const auto delta = planner.feed("```");
  EXPECT_EQ(delta.reasoning, "look it up.");
  EXPECT_EQ(delta.tool_calls.size(), 1u);
}

TEST(CohereLegacy, OversizedPlanIsReleased) {
  CohereParseOptions options;
  options.max_held_bytes = 24;
  const std::string text = "Plan: a long plan that goes on.\nAction: ```json\n[{\"tool_name\": \"t\"}]\n```";
  const auto result = test::parse_legacy(text, options);
  EXPECT_EQ(result.content, "Plan: a long plan that goes on.\n");  // the plan is content, the action still parses
  EXPECT_EQ(result.tool_calls.size(), 1u);
}

// Random texts made of the pieces the parser cares about (markers, their prefixes, tags, JSON, legacy keywords,
// multi-byte characters): never a crash, whole characters in every delta, and the same result for every split,
// in both formats and under several options (a small byte limit among them).
TEST(CohereOutput, RandomTextsSplitTheSame) {
  const std::vector<std::string> fragments = {
      "<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_ACTION|>",
      "<|END_ACTION|>", "<|END_OF_TURN_TOKEN|>", "<EOS_TOKEN>", "<|", "|>", "<|START_", "<", "<co>", "<co: 0:[1]>",
      "</co: 0:[1,2]>", "</co>", "</co: x>", "<co", "[", "]", "{", "}", "\"", "\\", ",", "\"tool_name\": \"t\"",
      R"("parameters": {"a": "]}\"<|END_ACTION|>"})", R"([{"tool_name": "x", "parameters": {"n": 1}}])", "Plan: ",
      "Action: ```json\n", "```", "\n", " ", "abc", "é", "𝄞", "中文", "Action:", "json"};
  std::vector<std::pair<CohereFormat, CohereParseOptions>> setups;
  for (const auto format : {CohereFormat::kActions, CohereFormat::kLegacyActions}) {
    CohereParseOptions options;
    setups.emplace_back(format, options);
    options.citations = true;
    options.max_held_bytes = 20;
    setups.emplace_back(format, options);
    options = {};
    options.tool_calls = false;
    options.citations = true;
    setups.emplace_back(format, options);
    options = {};
    options.reasoning = false;
    options.starts_in_thinking = true;
    setups.emplace_back(format, options);
  }
  std::mt19937 random(20240611);
  for (int round = 0; round < 60; ++round) {
    std::string text;
    const int count = 1 + static_cast<int>(random() % 24);
    for (int i = 0; i < count; ++i) text += fragments[random() % fragments.size()];
    for (const auto& [format, options] : setups) test::parse_cohere(text, format, options);
    if (HasFailure()) break;
  }
}

}  // namespace
}  // namespace tide
