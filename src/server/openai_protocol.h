// The OpenAI request schema: parsing and validating /v1/completions and /v1/chat/completions bodies (plus vLLM's
// extensions) into what the engine takes, with no sockets and no engine. Every refusal is an ApiError 400 naming
// the parameter. Checks that need the model (the served name, the vocabulary, max_model_len, the chat template)
// are the caller's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/generation.h"
#include "server/structured_output.h"

namespace tide::server {

// One prompt of a completion request: text, or token ids.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> ids;  // when text is unset
};

// What completions and chat share.
struct GenerationRequest {
  std::optional<std::string> model;   // unset: the served model
  GenerateOptions options;            // max_tokens stays as parsed; see max_tokens
  std::optional<int64_t> max_tokens;  // unset: the endpoint's default
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool return_tokens_as_token_ids = false;  // vLLM: logprobs tokens spelled "token_id:<id>"
  std::optional<StructuredOutput> structured;  // response_format / structured_outputs / guided_*
};

struct CompletionRequest : GenerationRequest {
  std::vector<PromptInput> prompts;   // one or more (a list of prompts gives n choices each)
  bool echo = false;                  // the prompt's text before the completion
};

struct ChatRequest : GenerationRequest {
  // As sent (list content, absent keys), but tool calls' JSON-string arguments given as objects, which is what
  // chat templates print (see chat_messages in the .cpp).
  nlohmann::ordered_json messages;
  bool add_generation_prompt = true;
  nlohmann::ordered_json tools;               // null or a list of {"type": "function", "function": {"name", ...}}
  nlohmann::ordered_json documents;           // null or an array
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  int top_logprobs = 0;               // with logprobs: options.logprobs = top_logprobs
  // "auto": the model may call the tools; "none": it may not (the template gets no tools, nothing is parsed as a
  // call); "required": it must call one or more; "function": it must call `tool_choice_function`. The last two
  // constrain the output to Cohere's action format with each tool's parameter schema.
  std::string tool_choice = "auto";
  std::string tool_choice_function;
  bool parallel_tool_calls = true;  // false: at most one call (enforced by constraining the output)
  bool strict_tools = false;        // calls follow their tool's schema under "auto" too (a tool's strict: true)
  // The named template to render with (a model's list of named templates), or a template's Jinja text (only
  // where the server trusts request templates); unset: chosen by the request's tools and documents.
  std::optional<std::string> chat_template;
  // Thinking budget in tokens (reasoning models): the thinking block is closed after this many.
  std::optional<int64_t> thinking_budget;
  bool include_reasoning = true;  // reasoning_content in the response (the thinking is parsed out either way)
  // Grounded answers: chat_template_kwargs.enable_citations asks the template for citation tags, and the tags
  // are returned as citations.
  bool citations = false;
  nlohmann::ordered_json citation_documents;  // the documents as citations name them; null: `documents`
};
// Completions' default max_tokens (OpenAI's).
inline constexpr int64_t kDefaultCompletionMaxTokens = 16;

// Parses a JSON body; throws ApiError 400 for invalid JSON (including invalid UTF-8), wrong types and values out
// of range.
nlohmann::ordered_json parse_body(std::string_view body);
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body);
ChatRequest parse_chat_request(const nlohmann::ordered_json& body);

// Shared with the Cohere parser: OpenAI's tools list (null when absent), each tool checked; a tool call's
// arguments given as a JSON object string become the object (templates print them with tojson).
nlohmann::ordered_json parse_tools(const nlohmann::ordered_json& body);
void arguments_as_object(nlohmann::ordered_json& call);

// /tokenize: {"prompt": text, "add_special_tokens"?} or {"messages": [...], "add_generation_prompt"?, ...}.
struct TokenizeRequest {
  std::optional<std::string> model;
  std::optional<std::string> prompt;
  std::optional<ChatRequest> chat;  // when messages were given
  bool add_special_tokens = true;
};
TokenizeRequest parse_tokenize_request(const nlohmann::ordered_json& body);

// /detokenize: {"tokens": [ids]}.
struct DetokenizeRequest {
  std::optional<std::string> model;
  std::vector<int32_t> tokens;
};
DetokenizeRequest parse_detokenize_request(const nlohmann::ordered_json& body);

}  // namespace tide::server
