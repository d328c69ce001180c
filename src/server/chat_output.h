// ChatOutput: one chat sample's generated text turned into what the chat APIs return: the answer, the
// reasoning (a thinking block or tool plan), tool calls with their ids, and citations with their sources, both
// whole (the response) and as the new parts of each delta (streaming). With a Cohere template the text is parsed
// (chat/cohere_output.h); otherwise it is the answer as generated.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/cohere_output.h"

namespace tide::server {

// What a chat request's samples are parsed with; shared by its samples.
struct ChatOutputOptions {
  std::optional<CohereFormat> format;  // unset: no parsing
  CohereParseOptions parse;
  bool tools_requested = false;             // the reasoning is the plan of tool calls (Cohere's tool_plan)
  nlohmann::ordered_json messages;          // the request's messages and documents, where citations point
  nlohmann::ordered_json documents;
};

struct ToolCallOutput {
  std::string id;  // "call_" and 24 random hex digits, unique per call
  std::string name;
  std::string arguments;  // JSON text
};

class ChatOutput {
 public:
  explicit ChatOutput(std::shared_ptr<const ChatOutputOptions> options);

  // What one delta added.
  struct Delta {
    std::string reasoning;
    std::string content;
    std::vector<ToolCallOutput> tool_calls;
    nlohmann::ordered_json citations = nlohmann::ordered_json::array();  // as citation_json() makes them

    bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty() && citations.empty(); }
  };

  // Folds in the sample's next text; `finished`: the sample ended (what was held back is settled).
  Delta add(std::string_view text, bool finished);

  const std::string& reasoning() const { return reasoning_; }
  const std::string& content() const { return content_; }
  const std::vector<ToolCallOutput>& tool_calls() const { return tool_calls_; }
  const nlohmann::ordered_json& citations() const { return citations_; }
  bool tools_requested() const { return options_->tools_requested; }

 private:
  nlohmann::ordered_json citation_json(const ParsedCitation& citation) const;

  std::shared_ptr<const ChatOutputOptions> options_;
  std::optional<CohereOutputParser> parser_;
  std::string reasoning_;
  std::string content_;
  std::vector<ToolCallOutput> tool_calls_;
  nlohmann::ordered_json citations_ = nlohmann::ordered_json::array();
};

// A tool call as OpenAI's message and Cohere's v2 message hold it: {"id", "type": "function", "function":
// {"name", "arguments"}}.
nlohmann::ordered_json tool_call_json(const ToolCallOutput& call);

}  // namespace tide::server
