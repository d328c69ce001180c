// Cohere's chat API (POST /v2/chat): its request body turned into the ChatRequest the OpenAI chat endpoint also
// builds, so both reach the engine the same way, and the names of its finish reasons. The response and its
// stream events are shaped in cohere_response.h. Every refusal is an ApiError 400 naming the field.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/generation.h"
#include "server/openai_protocol.h"

namespace tide::server {

// Cohere's fields and what they become:
// - messages (user / system / assistant / tool): text parts joined by newlines (what Cohere's templates print for
//   a list of text parts); assistant tool_calls as OpenAI's (arguments given to the template as an object),
//   tool_plan kept; a tool message's content parts become its results: a document part its `data`, a text part
//   its text.
// - documents: strings, or {"id"?, "data": {...}}; the template gets the data, citations return the document
//   with its id (given, else "doc:<index>").
// - citation_options.mode: anything but OFF / DISABLED turns citations on (the template's enable_citations).
// - thinking {type: enabled | disabled, token_budget}: the template's `reasoning` and the thinking budget.
// - safety_mode: the template's safety_mode. k, p, temperature, seed, frequency_penalty, presence_penalty,
//   max_tokens, stop_sequences, stream: the sampling and generation options.
// - tool_choice REQUIRED, strict_tools, a json response_format and logprobs need what this server does not
//   have yet: refused, naming the field.
ChatRequest parse_cohere_chat_request(const nlohmann::ordered_json& body);

// Cohere's finish_reason of a sample: COMPLETE, STOP_SEQUENCE, MAX_TOKENS, TOOL_CALL or ERROR.
std::string cohere_finish_reason(FinishReason reason, bool stopped_by_string, bool tool_calls);

}  // namespace tide::server
