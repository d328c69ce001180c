// Structured outputs in requests: OpenAI's response_format (json_object, json_schema with strict), vLLM's
// structured_outputs {json, regex, choice, grammar, json_object} and its older guided_json / guided_regex /
// guided_choice / guided_grammar fields, and Cohere's response_format. Parsed here into one StructuredOutput;
// compiled against the model's vocabulary by the service (grammar_cache.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tide::server {

struct StructuredOutput {
  enum class Kind { kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kJsonObject;
  nlohmann::ordered_json schema;  // kJsonSchema
  std::string text;               // kRegex: the pattern; kGrammar: GBNF
  std::vector<std::string> choices;
  std::string field;              // the request field it came from, named in refusals
};

// The request's constraint, if any: at most one of response_format (other than text), structured_outputs and
// the guided_* fields. Throws ApiError 400 naming the field on a malformed one or on two at once.
std::optional<StructuredOutput> parse_structured_output(const nlohmann::ordered_json& body);

// Cohere's response_format: {"type": "text"} or {"type": "json_object", "json_schema"?: {...}}.
std::optional<StructuredOutput> parse_cohere_response_format(const nlohmann::ordered_json& body);

}  // namespace tide::server
