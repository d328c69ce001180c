#include "server/cohere_response.h"

namespace tide::server {
namespace {

using json = nlohmann::ordered_json;

json event(const char* type) { return {{"type", type}}; }

// {"type", "index", "delta": {"message": {key: value}}}.
json message_event(const char* type, int index, const char* key, json value) {
  json e = event(type);
  if (index >= 0) e["index"] = index;
  e["delta"] = {{"message", {{key, std::move(value)}}}};
  return e;
}

}  // namespace

json cohere_usage(int64_t input_tokens, int64_t output_tokens) {
  const json counts = {{"input_tokens", input_tokens}, {"output_tokens", output_tokens}};
  return {{"billed_units", counts}, {"tokens", counts}};
}

json cohere_chat_response(const std::string& id, const ChatOutput& output, bool include_reasoning,
                          const std::string& finish_reason, const json& usage) {
  json message = {{"role", "assistant"}};
  json content = json::array();
  const bool plan = output.tools_requested();
  if (include_reasoning && !plan && !output.reasoning().empty()) {
    content.push_back({{"type", "thinking"}, {"thinking", output.reasoning()}});
  }
  if (!output.content().empty()) content.push_back({{"type", "text"}, {"text", output.content()}});
  if (!content.empty()) message["content"] = std::move(content);
  if (include_reasoning && plan && !output.reasoning().empty()) message["tool_plan"] = output.reasoning();
  if (!output.tool_calls().empty()) {
    json calls = json::array();
    for (const ToolCallOutput& call : output.tool_calls()) calls.push_back(tool_call_json(call));
    message["tool_calls"] = std::move(calls);
  }
  if (!output.citations().empty()) message["citations"] = output.citations();
  return {{"id", id}, {"finish_reason", finish_reason}, {"message", std::move(message)}, {"usage", usage}};
}

json CohereStream::message_start(const std::string& id) const {
  json e = event("message-start");
  e["id"] = id;
  e["delta"] = {{"message", {{"role", "assistant"}, {"content", json::array()}, {"tool_plan", ""},
                             {"tool_calls", json::array()}, {"citations", json::array()}}}};
  return e;
}

void CohereStream::switch_to(Block next, std::vector<json>& events) {
  if (open_ == next) return;
  if (open_ != Block::kNone) {
    json end = event("content-end");
    end["index"] = content_index_;
    events.push_back(std::move(end));
  }
  open_ = next;
  if (next == Block::kNone) return;
  ++content_index_;
  json start = next == Block::kThinking ? json{{"type", "thinking"}, {"thinking", ""}} : json{{"type", "text"}, {"text", ""}};
  events.push_back(message_event("content-start", content_index_, "content", std::move(start)));
}

void CohereStream::add(const ChatOutput::Delta& d, bool tools_requested, bool include_reasoning,
                       std::vector<json>& events) {
  if (include_reasoning && !d.reasoning.empty()) {
    if (tools_requested) {
      switch_to(Block::kNone, events);
      events.push_back(message_event("tool-plan-delta", -1, "tool_plan", d.reasoning));
    } else {
      switch_to(Block::kThinking, events);
      events.push_back(message_event("content-delta", content_index_, "content", {{"thinking", d.reasoning}}));
    }
  }
  if (!d.content.empty()) {
    switch_to(Block::kText, events);
    events.push_back(message_event("content-delta", content_index_, "content", {{"text", d.content}}));
  }
  for (const json& citation : d.citations) {
    events.push_back(message_event("citation-start", citations_, "citations", citation));
    json end = event("citation-end");
    end["index"] = citations_++;
    events.push_back(std::move(end));
  }
  if (!d.tool_calls.empty()) switch_to(Block::kNone, events);
  for (const ToolCallOutput& call : d.tool_calls) {
    const int index = tool_calls_++;
    json start = tool_call_json(call);
    start["function"]["arguments"] = "";
    events.push_back(message_event("tool-call-start", index, "tool_calls", std::move(start)));
    events.push_back(message_event("tool-call-delta", index, "tool_calls", {{"function", {{"arguments", call.arguments}}}}));
    json end = event("tool-call-end");
    end["index"] = index;
    events.push_back(std::move(end));
  }
}

void CohereStream::end(const std::string& finish_reason, const json& usage, const std::string& error,
                       std::vector<json>& events) {
  switch_to(Block::kNone, events);
  json e = event("message-end");
  e["delta"] = {{"finish_reason", finish_reason}, {"usage", usage}};
  if (!error.empty()) e["delta"]["error"] = error;
  events.push_back(std::move(e));
}

}  // namespace tide::server
