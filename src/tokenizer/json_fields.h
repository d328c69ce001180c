// Checked access to the fields of tokenizer.json / tokenizer_config.json. These files are untrusted input, so
// every accessor verifies the JSON type and throws tide::Error naming the file and field path
// ("tokenizer.json: model.merges[3] must be ..."), never letting a nlohmann exception or a crash through.
// Non-goal: a schema validator; unknown fields are ignored, as HF does.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace tide::json_fields {

using Json = nlohmann::json;

// Ids above this are rejected: tables are indexed by id, and no real vocabulary comes close.
inline constexpr int64_t kMaxTokenId = (int64_t{1} << 22) - 1;

// Parses `text`; a syntax error becomes tide::Error naming `file`.
Json parse(std::string_view text, std::string_view file);

// Field paths: the root is "FILE:" and children read "FILE: a.b[2].c".
std::string child(const std::string& path, std::string_view key);
std::string element(const std::string& path, size_t index);

// obj[key], or nullptr when the key is absent or null. Throws when `obj` is not an object.
const Json* find(const Json& obj, std::string_view key, const std::string& path);
// obj[key]; throws when it is absent or null.
const Json& require(const Json& obj, std::string_view key, const std::string& path);

// Each throws tide::Error naming `path` when `value` has another JSON type.
const std::string& as_string(const Json& value, const std::string& path);
bool as_bool(const Json& value, const std::string& path);
const Json& as_array(const Json& value, const std::string& path);
const Json& as_object(const Json& value, const std::string& path);
// An integer in [0, kMaxTokenId].
int32_t as_token_id(const Json& value, const std::string& path);

// obj[key] as a bool, or `fallback` when absent or null.
bool bool_or(const Json& obj, std::string_view key, bool fallback, const std::string& path);
// obj["type"] as a string (the tag of every HF component).
const std::string& type_of(const Json& obj, const std::string& path);

}  // namespace tide::json_fields
