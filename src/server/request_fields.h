// Typed reads of a JSON request body's fields for the protocol parsers (OpenAI's and Cohere's). Each refusal is
// an ApiError 400 naming the field; a field that is absent or JSON null counts as not given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tide::server {

// Bodies keep the client's key order (tools and their parameters reach the chat template as sent).
using json = nlohmann::ordered_json;

// The field `name` of `body`; null when absent or JSON null.
const json* field(const json& body, const char* name);
std::optional<bool> get_bool(const json& body, const char* name);
std::optional<std::string> get_string(const json& body, const char* name);
// An integer in [lo, hi].
std::optional<int64_t> get_int(const json& body, const char* name, int64_t lo, int64_t hi);
// A finite number in [lo, hi] (lo excluded when lo_open).
std::optional<double> get_number(const json& body, const char* name, double lo, double hi, bool lo_open = false);
// A token id (a non-negative int32); `param` names the field in the refusal.
int32_t token_id(const json& v, const char* param);
std::vector<int32_t> token_ids(const json& array, const char* param);
// Stop strings: a string or a list of strings, at most 64 of at most 4096 bytes, none empty.
std::vector<std::string> stop_strings(const json& body, const char* name);
// OpenAI's logit_bias: {"token id": bias in [-100, 100]}.
std::vector<std::pair<int32_t, float>> logit_bias(const json& body);

}  // namespace tide::server
