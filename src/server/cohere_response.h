// Cohere's v2 chat response shapes: the whole response body, and the stream of typed events (message-start,
// content-start / -delta / -end for thinking and text blocks, tool-plan-delta, tool-call-start / -delta / -end,
// citation-start / -end, message-end). A request with tools gets its reasoning as the tool_plan; one without, as
// a "thinking" content block, as Cohere's reasoning models return it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/chat_output.h"

namespace tide::server {

// {"billed_units": {"input_tokens", "output_tokens"}, "tokens": {...}}.
nlohmann::ordered_json cohere_usage(int64_t input_tokens, int64_t output_tokens);

// {"id", "finish_reason", "message": {"role", "content"?, "tool_plan"?, "tool_calls"?, "citations"?}, "usage"}.
nlohmann::ordered_json cohere_chat_response(const std::string& id, const ChatOutput& output, bool include_reasoning,
                                            const std::string& finish_reason, const nlohmann::ordered_json& usage);

// The events of one streamed response, block by block.
class CohereStream {
 public:
  nlohmann::ordered_json message_start(const std::string& id) const;
  // The events of what a delta added.
  void add(const ChatOutput::Delta& delta, bool tools_requested, bool include_reasoning,
           std::vector<nlohmann::ordered_json>& events);
  // Closes the open block and ends the message (with the error of a sample that failed, when not empty).
  void end(const std::string& finish_reason, const nlohmann::ordered_json& usage, const std::string& error,
           std::vector<nlohmann::ordered_json>& events);

 private:
  enum class Block { kNone, kThinking, kText };
  // Closes the open content block unless it is `next`; opens `next` (a new index) when it is not open.
  void switch_to(Block next, std::vector<nlohmann::ordered_json>& events);

  Block open_ = Block::kNone;
  int content_index_ = -1;  // the open (or last) content block
  int tool_calls_ = 0;
  int citations_ = 0;
};

}  // namespace tide::server
