// Constraints for requests (structured outputs and forced tool calls), compiled against the served model's
// vocabulary with src/grammar and handed to the engine as TokenConstraintSpecs. Compiled grammars are cached by
// what the request asked for, so a service that sends the same schema with every request compiles it once.
//
// In Cohere's chat format a constrained answer keeps the model's own markup around it: an optional thinking
// block (free text), then the constrained text inside <|START_RESPONSE|> ... <|END_RESPONSE|> (a JSON answer),
// or inside <|START_ACTION|> ... <|END_ACTION|> (forced tool calls), then the end of the turn. Where the
// vocabulary has no single token for a marker (small test vocabularies), the markers are part of the grammar's
// text instead, or left out for the optional ones.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/compiled_grammar.h"
#include "runtime/constraint.h"
#include "server/structured_output.h"
#include "tokenizer/tokenizer.h"

namespace tide::server {

// Where the constrained text sits in the output.
enum class ConstraintFrame {
  kPlain,          // the whole output (completions, templates not in Cohere's format)
  kCohereResponse, // Cohere chat: [thinking] [<|START_RESPONSE|>] text [<|END_RESPONSE|>]
};

class ConstraintCache {
 public:
  // `stop_ids`: the engine's stop ids (allowed where the constrained text may end). `capacity`: compiled
  // grammars kept (least recently used dropped).
  ConstraintCache(const Tokenizer& tokenizer, std::vector<int32_t> stop_ids, size_t capacity = 64);

  // The constraint of a structured output. Throws ApiError 400 naming `output.field` (and the schema keyword)
  // when the engine refuses it.
  std::shared_ptr<const TokenConstraintSpec> structured(const StructuredOutput& output, ConstraintFrame frame);

  // Tool calls in Cohere's action format: [thinking] <|START_ACTION|>[{"tool_call_id": "0", "tool_name": NAME,
  // "parameters": ARGS}, ...]<|END_ACTION|>, each call's parameters valid against its tool's JSON schema, the
  // tool `name` only when given (a named function); `single`: exactly one call (parallel_tool_calls false);
  // `optional`: the model may answer instead (<|START_RESPONSE|> free text <|END_RESPONSE|>), as under
  // tool_choice "auto" with strict tools. `tools`: OpenAI's list. Throws ApiError 400 naming `field` on a tool
  // whose schema the engine refuses, an unknown name, or (optional) a vocabulary without the markers.
  std::shared_ptr<const TokenConstraintSpec> tool_calls(const nlohmann::ordered_json& tools,
                                                        const std::optional<std::string>& name, bool single,
                                                        bool optional, const std::string& field);

  struct Stats {
    uint64_t compiled = 0;  // grammars compiled (cache misses)
    uint64_t hits = 0;
  };
  Stats stats() const;

 private:
  // The compiled grammar of `key`, compiling with `make` on a miss.
  std::shared_ptr<const grammar::CompiledGrammar> compiled(const std::string& key,
                                                           const std::function<grammar::Grammar()>& make);

  std::shared_ptr<const grammar::TokenVocabulary> vocabulary_;
  std::shared_ptr<const std::vector<uint32_t>> free_text_;  // every ordinary token (a thinking block's text)
  struct Markers {
    std::optional<int32_t> think_open, think_close, response_open, response_close, action_open, action_close;
  } markers_;
  size_t capacity_;
  mutable std::mutex mutex_;
  std::list<std::string> lru_;  // most recent first
  std::unordered_map<std::string, std::pair<std::shared_ptr<const grammar::CompiledGrammar>,
                                            std::list<std::string>::iterator>> cache_;
  Stats stats_;
};

}  // namespace tide::server
