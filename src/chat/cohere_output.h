// CohereOutputParser: splits the text a Cohere model generates (decoded with its special tokens, so the markers
// appear as text) into what the OpenAI API returns: reasoning, content, tool calls and citations. Streaming:
// feed() takes the text as it is generated, in pieces split anywhere (markers, JSON and citation tags included)
// and returns only what can no longer change; the deltas of feed() and finish() always add up to what feeding
// the whole text at once gives.
//
// The formats (Command R7B / Command A; Command R+ for the legacy actions):
//   <|START_THINKING|>plan or reasoning<|END_THINKING|>          -> reasoning
//   <|START_RESPONSE|>answer<|END_RESPONSE|>, text outside blocks -> content
//   <|START_ACTION|>[{"tool_call_id": "0", "tool_name": "search", "parameters": {...}}, ...]<|END_ACTION|>
//                                                                 -> tool calls
//   Plan: ...\nAction: ```json\n[{"tool_name": ..., "parameters": ...}]\n```   (kLegacyActions)
//   <co>span</co: 0:[1,2],1:[0]> or <co: 0:[1]>span</co: 0:[1]>  -> a citation of results 1 and 2 of tool call
//                                                                    "0" and result 0 of tool call "1"
// Nothing here throws on what a model writes: what does not parse stays text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tide {

enum class CohereFormat {
  kActions,        // <|START_ACTION|>[...]<|END_ACTION|> (Command R7B, Command A)
  kLegacyActions,  // Action: ```json [...] ``` (Command R+); <|START_ACTION|> blocks are understood too
};

struct CohereParseOptions {
  // Off: action blocks (and legacy `Action:` blocks) are content text, unchanged.
  bool tool_calls = true;
  // Off: the text of thinking blocks (and a legacy plan before a valid action) is dropped, markers included, so
  // that a plan or a long chain of reasoning never lands in the answer.
  bool reasoning = true;
  // On: <co ...>...</co: ...> tags are removed from the text and reported as citations. Off: they are text.
  bool citations = false;
  // The prompt already opened the thinking block (a template that ends its generation prompt with
  // <|START_THINKING|>): the text is reasoning until <|END_THINKING|>.
  bool starts_in_thinking = false;
  // An action block, a held legacy plan or a citation span that grows past this many bytes without closing is
  // released as text, so that memory stays bounded whatever the model writes.
  std::size_t max_held_bytes = std::size_t{1} << 20;
};

struct ParsedToolCall {
  std::string model_call_id;  // "tool_call_id" as generated (a number is written as its JSON text); may be empty
  std::string name;           // "tool_name"
  std::string arguments;      // the exact JSON text of "parameters" ("{}" when absent or null)

  bool operator==(const ParsedToolCall&) const = default;
};

// (tool_call_id, result indices) as the citation tag names them.
using CitationRefs = std::vector<std::pair<std::string, std::vector<int64_t>>>;

struct ParsedCitation {
  int64_t start = 0;  // code-point offsets into the clean text of its channel (content or reasoning),
  int64_t end = 0;    // counted from the beginning of the generation; [start, end)
  std::string text;   // the cited span
  CitationRefs sources;
  bool in_reasoning = false;

  bool operator==(const ParsedCitation&) const = default;
};

struct CohereDelta {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  std::vector<ParsedCitation> citations;

  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty() && citations.empty(); }
};

class CohereOutputParser {
 public:
  explicit CohereOutputParser(CohereFormat format, CohereParseOptions options = {});
  ~CohereOutputParser();
  CohereOutputParser(CohereOutputParser&&) noexcept;
  CohereOutputParser& operator=(CohereOutputParser&&) noexcept;

  // The next piece of generated text (whole UTF-8 characters; markers, JSON and tags may be split anywhere).
  // Returns what is settled; holds back only the shortest suffix that may still become a marker, a citation tag,
  // an action (a whole action block is held until it closes) or, in the legacy format, an `Action:` line (and a
  // leading `Plan:` until it is known whether an action follows).
  CohereDelta feed(std::string_view text);

  // The end of the generation: everything held is settled. An action block without its closing marker is parsed
  // as it stands (tool calls if its JSON is a complete, valid list; else content text, markers included). Later
  // feed() / finish() calls return empty deltas.
  CohereDelta finish();

  // Whether any tool call has been returned.
  bool saw_tool_calls() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The format a chat template asks the model for, from the template's source: "<|START_ACTION|>" -> kActions;
// "Action:" together with "```json" -> kLegacyActions; else nullopt (not a Cohere tool-use template).
std::optional<CohereFormat> cohere_format_of_template(std::string_view template_source);

// The objects the API returns for a citation's sources. `messages`: the request's OpenAI-shaped messages (assistant
// messages with "tool_calls": [{"id", "function": {...}}], tool messages with "tool_call_id" and "content", a
// string or a list); `documents`: null or a list (strings or objects). Cohere's templates number tool calls as
// they render them: with documents (a non-empty list), tool_call_id "0" is the documents (result i = documents[i])
// and the conversation's tool calls are "1", "2", ... in order of appearance; without, they start at "0".
// Returns, in the order of `refs`, one object per distinct source:
//   {"type": "document", "id": <the document's "id", else "doc:<i>">, "document": <the document; a string becomes
//    {"text": ...}>}
//   {"type": "tool", "id": "<the OpenAI tool call id>:<i>", "tool_output": <result i: the i-th element of a list
//    content; for i = 0 a string content, parsed when it is a JSON object, else {"text": content}>}
// References to nothing (an unknown call, an index out of range, a call without a result) are skipped.
nlohmann::ordered_json citation_sources(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& documents,
                                       const CitationRefs& refs);

}  // namespace tide
