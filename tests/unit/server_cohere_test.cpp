// Cohere's /v2/chat without sockets: its request body into the ChatRequest the engine path takes (messages,
// documents, citations, thinking, sampling defaults, refusals naming the field), its finish reasons, and the
// response and stream events ChatOutput's parsed deltas become.
#include <gtest/gtest.h>

#include <memory>

#include "server/api_error.h"
#include "server/chat_output.h"
#include "server/cohere_protocol.h"
#include "server/cohere_response.h"

namespace tide::server {
namespace {

using json = nlohmann::ordered_json;

ChatRequest cohere(const char* body) { return parse_cohere_chat_request(parse_body(body)); }

TEST(CohereProtocol, MessagesBecomeWhatTheTemplatesRead) {
  const ChatRequest r = cohere(R"({"model": "m", "messages": [
      {"role": "system", "content": "sys"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "tool_plan": "plan", "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": [{"type": "document", "document": {"data": {"k": "v"}}},
        {"type": "text", "text": "t"}]}],
    "tools": [{"type": "function", "function": {"name": "f"}}], "stop_sequences": ["END"], "max_tokens": 9,
    "stream": true})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.messages[0]["content"], "sys");
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_EQ(r.messages[2]["tool_plan"], "plan");
  EXPECT_FALSE(r.messages[2].contains("content"));
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"], json({{"x", 1}}));
  EXPECT_EQ(r.messages[3]["content"].dump(), R"([{"k":"v"},"t"])");
  EXPECT_EQ(r.tool_choice, "auto");
  EXPECT_EQ(r.options.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.max_tokens, 9);
  EXPECT_TRUE(r.stream);
  // Cohere's sampling defaults.
  EXPECT_DOUBLE_EQ(r.options.sampling.temperature, 0.3);
  EXPECT_DOUBLE_EQ(r.options.sampling.top_p, 0.75);
  EXPECT_EQ(r.options.sampling.top_k, 0);
  // Citations are on unless turned off, and the template is told so.
  EXPECT_TRUE(r.citations);
  EXPECT_EQ(r.chat_template_kwargs["enable_citations"], true);
}

TEST(CohereProtocol, DocumentsThinkingAndOptions) {
  const ChatRequest r = cohere(R"({"messages": [{"role": "user", "content": "q"}],
    "documents": ["plain", {"id": "d1", "data": {"title": "T", "snippet": "S"}}, {"data": "text data"}],
    "citation_options": {"mode": "off"}, "thinking": {"type": "disabled", "token_budget": 12},
    "safety_mode": "strict", "k": 40, "p": 0.5, "temperature": 0.9, "seed": 7, "tool_choice": "NONE"})");
  EXPECT_EQ(r.documents.dump(), R"(["plain",{"title":"T","snippet":"S"},"text data"])");
  EXPECT_EQ(r.citation_documents.dump(),
            R"([{"id":"doc:0","text":"plain"},{"title":"T","snippet":"S","id":"d1"},{"text":"text data","id":"doc:2"}])");
  EXPECT_FALSE(r.citations);
  EXPECT_EQ(r.chat_template_kwargs["enable_citations"], false);
  EXPECT_EQ(r.chat_template_kwargs["reasoning"], false);
  EXPECT_EQ(r.thinking_budget, 12);
  EXPECT_EQ(r.chat_template_kwargs["safety_mode"], "STRICT");
  EXPECT_EQ(r.options.sampling.top_k, 40);
  EXPECT_DOUBLE_EQ(r.options.sampling.top_p, 0.5);
  EXPECT_EQ(r.options.sampling.seed, 7u);
  EXPECT_EQ(r.tool_choice, "none");
}

TEST(CohereProtocol, RefusalsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({})", "messages"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image"}]}]})", "messages"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "messages"},
      {R"({"messages": [{"role": "tool", "tool_call_id": "a", "content": [{"type": "video"}]}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": "x"}], "documents": "d"})", "documents"},
      {R"({"messages": [{"role": "user", "content": "x"}], "documents": [{"id": 5, "data": {}}]})", "documents"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "REQUIRED"})", "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "strict_tools": 1})", "strict_tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})", "logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}})", "response_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "safety_mode": "LAX"})", "safety_mode"},
      {R"({"messages": [{"role": "user", "content": "x"}], "thinking": {"token_budget": -1}})", "token_budget"},
      {R"({"messages": [{"role": "user", "content": "x"}], "p": 0})", "p"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop_sequences": [""]})", "stop_sequences"},
  };
  for (const auto& [body, param] : cases) {
    SCOPED_TRACE(body);
    try {
      cohere(body);
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), param) << e.what();
    }
  }
}

TEST(CohereProtocol, JsonResponseFormat) {
  const ChatRequest r = cohere(R"({"messages": [{"role": "user", "content": "x"}],
    "response_format": {"type": "json_object", "json_schema": {"type": "object", "required": ["a"]}}})");
  ASSERT_TRUE(r.structured);
  EXPECT_EQ(r.structured->kind, StructuredOutput::Kind::kJsonSchema);
  EXPECT_EQ(r.structured->schema.dump(), R"({"type":"object","required":["a"]})");
  // The template is told too (Command A's templates describe the JSON mode to the model).
  EXPECT_EQ(r.chat_template_kwargs["response_format"]["type"], "json_object");
  EXPECT_FALSE(cohere(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "TEXT"}})").structured);
}

TEST(CohereProtocol, FinishReasons) {
  EXPECT_EQ(cohere_finish_reason(FinishReason::kStop, false, false), "COMPLETE");
  EXPECT_EQ(cohere_finish_reason(FinishReason::kStop, true, false), "STOP_SEQUENCE");
  EXPECT_EQ(cohere_finish_reason(FinishReason::kStop, false, true), "TOOL_CALL");
  EXPECT_EQ(cohere_finish_reason(FinishReason::kLength, false, true), "MAX_TOKENS");
  EXPECT_EQ(cohere_finish_reason(FinishReason::kError, false, false), "ERROR");
  EXPECT_EQ(cohere_finish_reason(FinishReason::kAbort, false, false), "ERROR");
}

std::shared_ptr<ChatOutputOptions> parsing(bool tools, bool citations) {
  auto o = std::make_shared<ChatOutputOptions>();
  o->format = CohereFormat::kActions;
  o->parse.tool_calls = tools;
  o->parse.citations = citations;
  o->tools_requested = tools;
  o->messages = json::array();
  o->documents = json::array({json{{"id", "d"}, {"text", "doc"}}});
  return o;
}

TEST(ChatOutput, WithoutAFormatTheTextIsTheAnswer) {
  auto o = std::make_shared<ChatOutputOptions>();
  ChatOutput out(o);
  EXPECT_EQ(out.add("<|START_ACTION|>[", false).content, "<|START_ACTION|>[");
  EXPECT_EQ(out.add("]", true).content, "]");
  EXPECT_EQ(out.content(), "<|START_ACTION|>[]");
  EXPECT_TRUE(out.tool_calls().empty());
}

TEST(ChatOutput, ToolCallsGetDistinctOpenAiIds) {
  ChatOutput out(parsing(/*tools=*/true, /*citations=*/false));
  ChatOutput::Delta d = out.add(R"(<|START_ACTION|>[{"tool_name": "f", "parameters": {"a": 1}}, )", false);
  EXPECT_TRUE(d.tool_calls.empty());  // the block is held until it closes
  d = out.add(R"({"tool_name": "g"}]<|END_ACTION|>)", true);
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].name, "f");
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"a": 1})");
  EXPECT_EQ(d.tool_calls[1].arguments, "{}");
  EXPECT_NE(d.tool_calls[0].id, d.tool_calls[1].id);
  EXPECT_EQ(d.tool_calls[0].id.size(), 29u);
  EXPECT_EQ(d.tool_calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(tool_call_json(d.tool_calls[0]).dump(),
            R"({"id":")" + d.tool_calls[0].id + R"(","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}})");
}

TEST(CohereResponse, WholeResponseShapes) {
  ChatOutput out(parsing(/*tools=*/false, /*citations=*/true));
  out.add("<|START_THINKING|>hmm<|END_THINKING|><|START_RESPONSE|>It is <co>so</co: 0:[0]>.<|END_RESPONSE|>", true);
  const json r = cohere_chat_response("id1", out, /*include_reasoning=*/true, "COMPLETE", cohere_usage(3, 4));
  EXPECT_EQ(r["id"], "id1");
  EXPECT_EQ(r["finish_reason"], "COMPLETE");
  EXPECT_EQ(r["message"]["content"].dump(), R"([{"type":"thinking","thinking":"hmm"},{"type":"text","text":"It is so."}])");
  EXPECT_EQ(r["message"]["citations"][0]["sources"][0]["id"], "d");
  EXPECT_EQ(r["usage"].dump(),
            R"({"billed_units":{"input_tokens":3,"output_tokens":4},"tokens":{"input_tokens":3,"output_tokens":4}})");
  EXPECT_FALSE(r["message"].contains("tool_plan"));
}

TEST(CohereResponse, StreamEventsOpenAndCloseBlocks) {
  ChatOutput out(parsing(/*tools=*/false, /*citations=*/true));
  CohereStream stream;
  std::vector<json> events;
  for (const char* piece : {"<|START_THINKING|>a", "b<|END_THINKING|><|START_RESPONSE|>x <co>y</co: 0:[0]>",
                            " z<|END_RESPONSE|>"}) {
    stream.add(out.add(piece, false), /*tools_requested=*/false, /*include_reasoning=*/true, events);
  }
  stream.add(out.add("", true), false, true, events);
  stream.end("COMPLETE", cohere_usage(1, 2), "", events);
  std::vector<std::string> types;
  for (const json& e : events) types.push_back(e["type"].get<std::string>() + (e.contains("index") ? std::to_string(e["index"].get<int>()) : ""));
  const std::vector<std::string> want = {"content-start0", "content-delta0", "content-delta0", "content-end0",
                                         "content-start1", "content-delta1", "citation-start0", "citation-end0",
                                         "content-delta1", "content-end1", "message-end"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(events[0]["delta"]["message"]["content"]["type"], "thinking");
  EXPECT_EQ(events[4]["delta"]["message"]["content"]["type"], "text");
  EXPECT_EQ(events.back()["delta"]["finish_reason"], "COMPLETE");
  EXPECT_FALSE(events.back()["delta"].contains("error"));
  std::vector<json> failed;
  CohereStream().end("ERROR", cohere_usage(1, 0), "out of memory", failed);
  EXPECT_EQ(failed.back()["delta"]["error"], "out of memory");
  // With tools the reasoning is the tool plan, outside any content block; a call is start, delta, end.
  ChatOutput tools(parsing(/*tools=*/true, /*citations=*/false));
  CohereStream tool_stream;
  std::vector<json> tool_events;
  tool_stream.add(tools.add(R"(<|START_THINKING|>p<|END_THINKING|><|START_ACTION|>[{"tool_name": "f"}]<|END_ACTION|>)", true),
                  true, true, tool_events);
  std::vector<std::string> tool_types;
  for (const json& e : tool_events) tool_types.push_back(e["type"]);
  EXPECT_EQ(tool_types, (std::vector<std::string>{"tool-plan-delta", "tool-call-start", "tool-call-delta", "tool-call-end"}));
  EXPECT_EQ(tool_events[1]["delta"]["message"]["tool_calls"]["function"]["arguments"], "");
  EXPECT_EQ(tool_events[2]["delta"]["message"]["tool_calls"]["function"]["arguments"], "{}");
}

}  // namespace
}  // namespace tide::server
