#include "tokenizer/json_fields.h"

#include "core/error.h"

namespace tide::json_fields {
namespace {

const char* type_name(const Json& value) { return value.type_name(); }

}  // namespace

Json parse(std::string_view text, std::string_view file) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    fail("{}: malformed JSON: {}", file, e.what());
  }
}

std::string child(const std::string& path, std::string_view key) {
  if (!path.empty() && path.back() == ':') return fmt::format("{} {}", path, key);
  return fmt::format("{}.{}", path, key);
}

std::string element(const std::string& path, size_t index) { return fmt::format("{}[{}]", path, index); }

const Json* find(const Json& obj, std::string_view key, const std::string& path) {
  as_object(obj, path);
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

const Json& require(const Json& obj, std::string_view key, const std::string& path) {
  const Json* value = find(obj, key, path);
  if (value == nullptr) fail("{} is missing", child(path, key));
  return *value;
}

const std::string& as_string(const Json& value, const std::string& path) {
  if (!value.is_string()) fail("{} must be a string, not {}", path, type_name(value));
  return value.get_ref<const std::string&>();
}

bool as_bool(const Json& value, const std::string& path) {
  if (!value.is_boolean()) fail("{} must be a boolean, not {}", path, type_name(value));
  return value.get<bool>();
}

const Json& as_array(const Json& value, const std::string& path) {
  if (!value.is_array()) fail("{} must be an array, not {}", path, type_name(value));
  return value;
}

const Json& as_object(const Json& value, const std::string& path) {
  if (!value.is_object()) fail("{} must be an object, not {}", path, type_name(value));
  return value;
}

int32_t as_token_id(const Json& value, const std::string& path) {
  if (!value.is_number_integer()) fail("{} must be an integer token id, not {}", path, type_name(value));
  // Unsigned JSON integers above INT64_MAX must not wrap to negative ids.
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(kMaxTokenId)) {
    fail("{} = {} is out of range [0, {}]", path, value.get<uint64_t>(), kMaxTokenId);
  }
  const auto id = value.get<int64_t>();
  if (id < 0 || id > kMaxTokenId) fail("{} = {} is out of range [0, {}]", path, id, kMaxTokenId);
  return static_cast<int32_t>(id);
}

bool bool_or(const Json& obj, std::string_view key, bool fallback, const std::string& path) {
  const Json* value = find(obj, key, path);
  return value == nullptr ? fallback : as_bool(*value, child(path, key));
}

const std::string& type_of(const Json& obj, const std::string& path) {
  return as_string(require(obj, "type", path), child(path, "type"));
}

}  // namespace tide::json_fields
