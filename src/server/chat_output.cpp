#include "server/chat_output.h"

#include <random>

#include <fmt/format.h>

namespace tide::server {
namespace {

using json = nlohmann::ordered_json;

std::string new_call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("call_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

}  // namespace

ChatOutput::ChatOutput(std::shared_ptr<const ChatOutputOptions> options) : options_(std::move(options)) {
  if (options_->format) parser_.emplace(*options_->format, options_->parse);
}

json ChatOutput::citation_json(const ParsedCitation& c) const {
  // Cohere's citation types: a span of the answer, of a tool plan, or of a reasoning model's thinking.
  const char* type = !c.in_reasoning ? "TEXT_CONTENT" : options_->tools_requested ? "PLAN" : "THINKING_CONTENT";
  return {{"start", c.start},
          {"end", c.end},
          {"text", c.text},
          {"sources", citation_sources(options_->messages, options_->documents, c.sources)},
          {"type", type}};
}

ChatOutput::Delta ChatOutput::add(std::string_view text, bool finished) {
  Delta d;
  if (!parser_) {
    d.content = std::string(text);
  } else {
    CohereDelta parsed = parser_->feed(text);
    if (finished) {
      CohereDelta rest = parser_->finish();
      parsed.reasoning += rest.reasoning;
      parsed.content += rest.content;
      parsed.tool_calls.insert(parsed.tool_calls.end(), rest.tool_calls.begin(), rest.tool_calls.end());
      parsed.citations.insert(parsed.citations.end(), rest.citations.begin(), rest.citations.end());
    }
    d.reasoning = std::move(parsed.reasoning);
    d.content = std::move(parsed.content);
    for (ParsedToolCall& call : parsed.tool_calls) {
      d.tool_calls.push_back({new_call_id(), std::move(call.name), std::move(call.arguments)});
    }
    for (const ParsedCitation& c : parsed.citations) d.citations.push_back(citation_json(c));
  }
  reasoning_ += d.reasoning;
  content_ += d.content;
  tool_calls_.insert(tool_calls_.end(), d.tool_calls.begin(), d.tool_calls.end());
  for (const json& c : d.citations) citations_.push_back(c);
  return d;
}

json tool_call_json(const ToolCallOutput& call) {
  return {{"id", call.id}, {"type", "function"}, {"function", {{"name", call.name}, {"arguments", call.arguments}}}};
}

}  // namespace tide::server
