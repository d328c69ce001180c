// The OpenAI request parsers (src/server/openai_protocol): accepted shapes, OpenAI's defaults, and the bad
// requests each refused with a 400 naming the parameter.
#include <gtest/gtest.h>

#include "chat/json_exact.h"
#include "server/api_error.h"
#include "server/openai_protocol.h"

namespace tide::server {
namespace {

using nlohmann::json;

CompletionRequest completion(const std::string& body) { return parse_completion_request(parse_body(body)); }
ChatRequest chat(const std::string& body) { return parse_chat_request(parse_body(body)); }

TEST(ServerProtocol, CompletionPromptShapes) {
  auto r = completion(R"({"model": "m", "prompt": "hello"})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "hello");
  EXPECT_EQ(r.model, "m");

  r = completion(R"({"prompt": ["a", "b"]})");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].text, "b");

  r = completion(R"({"prompt": [5, 6, 7]})");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].text);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{5, 6, 7}));

  r = completion(R"({"prompt": [[5, 6], [7]]})");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[1].ids, (std::vector<int32_t>{7}));
}

TEST(ServerProtocol, OpenAiDefaults) {
  const auto r = completion(R"({"prompt": "x"})");
  EXPECT_EQ(r.options.sampling.temperature, 1.0);
  EXPECT_EQ(r.options.sampling.top_p, 1.0);
  EXPECT_FALSE(r.max_tokens);
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.options.n, 1);
  EXPECT_EQ(r.options.logprobs, -1);
  EXPECT_TRUE(r.options.skip_special_tokens);
  EXPECT_TRUE(r.options.speculative);
}

TEST(ServerProtocol, CompletionParametersMap) {
  const auto r = completion(R"({"prompt": "x", "max_tokens": 7, "temperature": 0, "top_k": -1, "top_p": 0.5,
    "min_p": 0.1, "repetition_penalty": 1.2, "presence_penalty": 0.5, "frequency_penalty": -0.5, "seed": 42,
    "n": 2, "stop": "END", "stop_token_ids": [6], "ignore_eos": true, "min_tokens": 3, "logprobs": 2,
    "skip_special_tokens": false, "logit_bias": {"17": -100}, "stream": true, "stream_options": {"include_usage": true},
    "echo": true, "user": "u", "best_of": 2, "speculative": false})");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.options.sampling.temperature, 0.0);
  EXPECT_EQ(r.options.sampling.top_k, 0);
  EXPECT_EQ(r.options.sampling.top_p, 0.5);
  EXPECT_EQ(r.options.sampling.min_p, 0.1);
  EXPECT_EQ(r.options.sampling.repetition_penalty, 1.2);
  EXPECT_EQ(r.options.sampling.seed, 42u);
  EXPECT_EQ(r.options.n, 2);
  EXPECT_EQ(r.options.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.options.stop_token_ids, std::vector<int32_t>{6});
  EXPECT_TRUE(r.options.ignore_eos);
  EXPECT_FALSE(r.options.speculative);
  EXPECT_EQ(r.options.min_tokens, 3);
  EXPECT_EQ(r.options.logprobs, 2);
  EXPECT_FALSE(r.options.skip_special_tokens);
  ASSERT_EQ(r.options.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.options.sampling.logit_bias[0].first, 17);
  EXPECT_EQ(r.options.sampling.logit_bias[0].second, -100.0f);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.echo);
}

TEST(ServerProtocol, ChatMessagesAndLogprobs) {
  const auto r = chat(R"({"messages": [{"role": "system", "content": "s"},
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
    "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 3, "chat_template_kwargs": {"x": 1},
    "add_generation_prompt": false, "tools": [{"type": "function", "function": {"name": "f"}}]})");
  ASSERT_EQ(r.messages.size(), 2u);
  // Content parts reach the template as sent (the template joins or prints them).
  EXPECT_EQ(r.messages[1]["content"].dump(), R"([{"type":"text","text":"a"},{"type":"text","text":"b"}])");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.options.logprobs, 3);
  EXPECT_EQ(r.chat_template_kwargs["x"], 1);
  EXPECT_FALSE(r.add_generation_prompt);
  EXPECT_TRUE(r.tools.is_array());
  EXPECT_TRUE(r.documents.is_null());
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}]})").options.logprobs, -1);
  EXPECT_EQ(r.tool_choice, "auto");  // tools given, no choice: the model decides
}

TEST(ServerProtocol, ChatMessagesReachTheTemplateAsSent) {
  const auto r = chat(R"({"messages": [{"role": "user", "content": "q"},
    {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "f", "arguments": "{\"n\": 123456789012345678901234567890, \"s\": \"x\"}"}},
      {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "not json"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": [{"any": "result"}, 5]}],
    "tool_choice": "none", "chat_template": "rag", "thinking_budget": 7, "include_reasoning": false,
    "chat_template_kwargs": {"enable_citations": true}})");
  // No content key stays absent (a template's `is defined` must see it so).
  EXPECT_FALSE(r.messages[1].contains("content"));
  // JSON arguments become the object the templates print with tojson, big integers exact; others stay strings.
  const auto& args = r.messages[1]["tool_calls"][0]["function"]["arguments"];
  ASSERT_TRUE(args.is_object());
  EXPECT_EQ(dump_json_exact(args), R"({"n":123456789012345678901234567890,"s":"x"})");
  EXPECT_EQ(r.messages[1]["tool_calls"][1]["function"]["arguments"], "not json");
  EXPECT_EQ(r.messages[2]["content"].dump(), R"([{"any":"result"},5])");
  EXPECT_EQ(r.tool_choice, "none");
  EXPECT_EQ(r.chat_template, "rag");
  EXPECT_EQ(r.thinking_budget, 7);
  EXPECT_FALSE(r.include_reasoning);
  EXPECT_TRUE(r.citations);
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}]})").tool_choice, "none");  // no tools
}

struct BadCase {
  const char* endpoint;  // "completions" or "chat"
  const char* body;
  const char* param;     // the parameter named in the error ("" for the body itself)
};

// Every case must be refused with 400 naming `param`. The server's integration suite sends the same kinds of
// bodies over HTTP.
const BadCase kBadCases[] = {
    {"completions", "", ""},
    {"completions", "{", ""},
    {"completions", "[1, 2]", ""},
    {"completions", "\"prompt\"", ""},
    {"completions", "{\"prompt\": \"\xff\xfe\"}", ""},                      // invalid UTF-8
    {"completions", R"({"prompt": "\ud800"})", ""},                          // lone surrogate
    {"completions", R"({"prompt": "x",})", ""},
    {"completions", R"({})", "prompt"},
    {"completions", R"({"prompt": 5})", "prompt"},
    {"completions", R"({"prompt": []})", "prompt"},
    {"completions", R"({"prompt": [[]]})", "prompt"},
    {"completions", R"({"prompt": ["a", 5]})", "prompt"},
    {"completions", R"({"prompt": [1, -2]})", "prompt"},
    {"completions", R"({"prompt": [1, 2.5]})", "prompt"},
    {"completions", R"({"prompt": [1, 99999999999]})", "prompt"},
    {"completions", R"({"prompt": [{"a": 1}]})", "prompt"},
    {"completions", R"({"prompt": "x", "model": 5})", "model"},
    {"completions", R"({"prompt": "x", "max_tokens": -1})", "max_tokens"},
    {"completions", R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
    {"completions", R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
    {"completions", R"({"prompt": "x", "max_tokens": 18446744073709551615})", "max_tokens"},
    {"completions", R"({"prompt": "x", "temperature": -0.1})", "temperature"},
    {"completions", R"({"prompt": "x", "temperature": 2.5})", "temperature"},
    {"completions", R"({"prompt": "x", "temperature": "hot"})", "temperature"},
    {"completions", R"({"prompt": "x", "top_p": 0})", "top_p"},
    {"completions", R"({"prompt": "x", "top_p": 1.5})", "top_p"},
    {"completions", R"({"prompt": "x", "top_k": -2})", "top_k"},
    {"completions", R"({"prompt": "x", "min_p": 2})", "min_p"},
    {"completions", R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
    {"completions", R"({"prompt": "x", "frequency_penalty": -3})", "frequency_penalty"},
    {"completions", R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
    // Values that pass in double but are 0 or infinite in the f32 the sample op computes with.
    {"completions", R"({"prompt": "x", "repetition_penalty": 1e308})", "repetition_penalty"},
    {"completions", R"({"prompt": "x", "repetition_penalty": 3.5e38})", "repetition_penalty"},
    {"completions", R"({"prompt": "x", "repetition_penalty": 1e-46})", "repetition_penalty"},
    {"completions", R"({"prompt": "x", "top_p": 1e-50})", "top_p"},
    {"completions", R"({"prompt": "x", "temperature": 1e-50})", "temperature"},
    {"completions", R"({"prompt": "x", "n": 0})", "n"},
    {"completions", R"({"prompt": "x", "n": 1000})", "n"},
    {"completions", R"({"prompt": "x", "stream": "yes"})", "stream"},
    {"completions", R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
    {"completions", R"({"prompt": "x", "stream": true, "stream_options": 1})", "stream_options"},
    {"completions", R"({"prompt": "x", "stop": 5})", "stop"},
    {"completions", R"({"prompt": "x", "stop": [""]})", "stop"},
    {"completions", R"({"prompt": "x", "stop": ["a", 1]})", "stop"},
    {"completions", R"({"prompt": "x", "logprobs": 21})", "logprobs"},
    {"completions", R"({"prompt": "x", "logprobs": true})", "logprobs"},
    {"completions", R"({"prompt": "x", "logit_bias": {"abc": 1}})", "logit_bias"},
    {"completions", R"({"prompt": "x", "logit_bias": {"5": 101}})", "logit_bias"},
    {"completions", R"({"prompt": "x", "logit_bias": {"5": 1, "05": 2}})", "logit_bias"},
    {"completions", R"({"prompt": "x", "logit_bias": [1]})", "logit_bias"},
    {"completions", R"({"prompt": "x", "stop_token_ids": [-1]})", "stop_token_ids"},
    {"completions", R"({"prompt": "x", "stop_token_ids": 6})", "stop_token_ids"},
    {"completions", R"({"prompt": "x", "seed": "s"})", "seed"},
    {"completions", R"({"prompt": "x", "ignore_eos": 1})", "ignore_eos"},
    {"completions", R"({"prompt": "x", "speculative": "no"})", "speculative"},
    {"chat", R"({"messages": [{"role": "user", "content": "hi"}], "speculative": 0})", "speculative"},
    {"completions", R"({"prompt": "x", "min_tokens": -1})", "min_tokens"},
    {"completions", R"({"prompt": "x", "min_tokens": 5, "max_tokens": 2})", "min_tokens"},
    {"completions", R"({"prompt": "x", "best_of": 3})", "best_of"},
    {"completions", R"({"prompt": "x", "suffix": "s"})", "suffix"},
    {"completions", R"({"prompt": "x", "echo": "no"})", "echo"},
    {"completions", R"({"prompt": "x", "response_format": {"type": "xml"}})", "response_format"},
    {"completions", R"({"prompt": "x", "response_format": {"type": "json_schema"}})", "response_format"},
    {"completions", R"({"prompt": "x", "response_format": {"type": "json_schema", "json_schema": {"schema": 5}}})", "response_format"},
    {"completions", R"({"prompt": "x", "structured_outputs": {"regex": ""}})", "structured_outputs"},
    {"completions", R"({"prompt": "x", "structured_outputs": {"regex": "a", "choice": ["b"]}})", "structured_outputs"},
    {"completions", R"({"prompt": "x", "guided_choice": []})", "guided_choice"},
    {"completions", R"({"prompt": "x", "guided_json": "{not json"})", "guided_json"},
    {"completions", R"({"prompt": "x", "guided_regex": "a", "response_format": {"type": "json_object"}})", "guided_regex"},
    {"chat", R"({})", "messages"},
    {"chat", R"({"messages": []})", "messages"},
    {"chat", R"({"messages": "hi"})", "messages"},
    {"chat", R"({"messages": [5]})", "messages"},
    {"chat", R"({"messages": [{"content": "hi"}]})", "messages"},
    {"chat", R"({"messages": [{"role": 1, "content": "hi"}]})", "messages"},
    {"chat", R"({"messages": [{"role": "user", "content": 5}]})", "messages"},
    {"chat", R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages"},
    {"chat", R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
    {"chat", R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 30})",
     "top_logprobs"},
    {"chat", R"({"messages": [{"role": "user", "content": "x"}], "logprobs": 1})", "logprobs"},
    {"chat", R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})", "tools"},
    {"chat", R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "tools"},
    {"chat", R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"function": {"name": 3}}]})", "tools"},
    {"chat", R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", "tool_choice"},
    {"chat", R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function"}})", "tool_choice"},
    {"chat", R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "sometimes"})", "tool_choice"},
    {"chat", R"({"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": "no"})", "parallel_tool_calls"},
    {"chat", R"({"messages": [{"role": "user", "content": "x"}], "thinking_budget": -1})", "thinking_budget"},
    {"chat", R"({"messages": [{"role": "user", "content": "x"}], "chat_template": 5})", "chat_template"},
    {"chat", R"({"messages": [{"role": "assistant", "tool_calls": {}}]})", "messages"},
    {"chat", R"({"messages": [{"role": "assistant", "tool_calls": [5]}]})", "messages"},
    {"chat", R"({"messages": [{"role": "assistant", "content": [{"type": "image_url"}]}]})", "messages"},
    {"chat", R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []})", "chat_template_kwargs"},
    {"chat", R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": -5})", "max_completion_tokens"},
};

TEST(ServerProtocol, StructuredOutputFields) {
  using Kind = StructuredOutput::Kind;
  auto structured = [](const char* body) { return completion(body).structured; };
  EXPECT_FALSE(structured(R"({"prompt": "x", "response_format": {"type": "text"}})"));
  EXPECT_EQ(structured(R"({"prompt": "x", "response_format": {"type": "json_object"}})")->kind, Kind::kJsonObject);
  const auto schema = structured(R"({"prompt": "x", "response_format": {"type": "json_schema",
      "json_schema": {"name": "n", "strict": true, "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}}})");
  ASSERT_TRUE(schema);
  EXPECT_EQ(schema->kind, Kind::kJsonSchema);
  EXPECT_EQ(schema->schema.dump(), R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  EXPECT_EQ(structured(R"({"prompt": "x", "structured_outputs": {"json": "{\"type\": \"string\"}"}})")->schema.dump(),
            R"({"type":"string"})");
  EXPECT_EQ(structured(R"({"prompt": "x", "structured_outputs": {"regex": "[0-9]+"}})")->text, "[0-9]+");
  EXPECT_EQ(structured(R"({"prompt": "x", "guided_choice": ["yes", "no"]})")->choices, (std::vector<std::string>{"yes", "no"}));
  const auto grammar = structured(R"({"prompt": "x", "guided_grammar": "root ::= \"a\""})");
  EXPECT_EQ(grammar->kind, Kind::kGrammar);
  EXPECT_EQ(grammar->field, "guided_grammar");
  EXPECT_EQ(chat(R"({"messages": [{"role": "user", "content": "x"}], "structured_outputs": {"json_object": true}})")
                .structured->kind, Kind::kJsonObject);
}

TEST(ServerProtocol, ToolChoices) {
  const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f", "strict": true}}])";
  const auto required = chat(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required", )" + tools + "}");
  EXPECT_EQ(required.tool_choice, "required");
  EXPECT_TRUE(required.strict_tools);
  const auto named = chat(R"({"messages": [{"role": "user", "content": "x"}], "parallel_tool_calls": false,
      "tool_choice": {"type": "function", "function": {"name": "f"}}, )" + tools + "}");
  EXPECT_EQ(named.tool_choice, "function");
  EXPECT_EQ(named.tool_choice_function, "f");
  EXPECT_FALSE(named.parallel_tool_calls);
  EXPECT_THROW(chat(R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})"), ApiError);
}

TEST(ServerProtocol, BadRequestsAre400NamingTheParameter) {
  ASSERT_GE(std::size(kBadCases), 30u);
  for (const BadCase& c : kBadCases) {
    SCOPED_TRACE(std::string(c.endpoint) + " " + c.body);
    try {
      if (std::string(c.endpoint) == "chat") {
        chat(c.body);
      } else {
        completion(c.body);
      }
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), c.param) << e.what();
      EXPECT_EQ(e.type(), "invalid_request_error");
      EXPECT_FALSE(std::string(e.what()).empty());
    }
  }
}

TEST(ServerProtocol, DeeplyNestedBodiesAreRefused) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THROW(parse_body(deep), ApiError);
  EXPECT_NO_THROW(parse_body(std::string(10, '[') + std::string(10, ']')));
  // A parse error names its place with a short excerpt, never the whole (here 1 MB) token it stopped in.
  const std::string huge = R"({"prompt": "a", "x": )" + std::string(1 << 20, 'z') + "}";
  try {
    parse_body(huge);
    ADD_FAILURE() << "no error";
  } catch (const ApiError& e) {
    const std::string message = e.what();
    EXPECT_LT(message.size(), 300u) << message;
    EXPECT_NE(message.find("near byte 21"), std::string::npos) << message;
    EXPECT_NE(message.find("\"x\": zzz"), std::string::npos) << message;
  }
}

TEST(ServerProtocol, TokenizeAndDetokenize) {
  const auto t = parse_tokenize_request(parse_body(R"({"prompt": "hi", "add_special_tokens": false})"));
  EXPECT_EQ(t.prompt, "hi");
  EXPECT_FALSE(t.add_special_tokens);
  const auto c = parse_tokenize_request(parse_body(R"({"messages": [{"role": "user", "content": "x"}]})"));
  EXPECT_TRUE(c.chat);
  EXPECT_FALSE(c.add_special_tokens);
  EXPECT_THROW(parse_tokenize_request(parse_body("{}")), ApiError);
  EXPECT_EQ(parse_detokenize_request(parse_body(R"({"tokens": [1, 2]})")).tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_THROW(parse_detokenize_request(parse_body(R"({"tokens": [-1]})")), ApiError);
  EXPECT_THROW(parse_detokenize_request(parse_body(R"({"tokens": "1"})")), ApiError);
}

TEST(ServerProtocol, ErrorJsonHasOpenAisShape) {
  const json j = error_json(ApiError(400, "bad temperature", "temperature"));
  ASSERT_TRUE(j.contains("error"));
  EXPECT_EQ(j["error"]["message"], "bad temperature");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "temperature");
  EXPECT_EQ(j["error"]["code"], 400);
  const json k = error_json(ApiError(404, "The model `x` does not exist.", "model", "NotFoundError"));
  EXPECT_EQ(k["error"]["type"], "NotFoundError");
  const json u = error_json(ApiError(401, "Unauthorized"));
  EXPECT_EQ(u["error"]["type"], "authentication_error");
  EXPECT_TRUE(u["error"]["param"].is_null());
  EXPECT_EQ(dump_json(json{{"s", std::string("a\xff")}}), "{\"s\":\"a\xef\xbf\xbd\"}");
}

}  // namespace
}  // namespace tide::server

namespace tide::server {
namespace {

// Stop strings are matched against every generated token: their number and length are bounded.
TEST(ServerProtocol, StopStringsAreBounded) {
  auto stops = [](int count, size_t length) {
    nlohmann::json body = {{"prompt", "x"}, {"stop", nlohmann::json::array()}};
    for (int i = 0; i < count; ++i) body["stop"].push_back(std::string(length, 'a') + std::to_string(i));
    return body.dump();
  };
  EXPECT_EQ(completion(stops(64, 4000)).options.stop.size(), 64u);
  for (const std::string& body : {stops(65, 1), stops(1, 4096)}) {
    try {
      completion(body);
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param(), "stop") << e.what();
    }
  }
}

}  // namespace
}  // namespace tide::server
