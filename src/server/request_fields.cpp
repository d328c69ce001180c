// Typed reads of request fields, each refusal an ApiError 400 naming the field (shared by the OpenAI and Cohere
// request parsers).
#include "server/request_fields.h"

#include <cmath>
#include <limits>

#include "server/api_error.h"

namespace tide::server {

// The field `name` of `body`; null when absent or JSON null (OpenAI treats both as "not given").
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<bool> get_bool(const json& body, const char* name) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) bad_request(name, std::string("'") + name + "' must be a boolean");
  return v->get<bool>();
}

std::optional<std::string> get_string(const json& body, const char* name) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) bad_request(name, std::string("'") + name + "' must be a string");
  return v->get<std::string>();
}

// An integer in [lo, hi].
std::optional<int64_t> get_int(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  const std::string quoted = std::string("'") + name + "'";
  if (!v->is_number_integer()) bad_request(name, quoted + " must be an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    bad_request(name, quoted + " is out of range");
  }
  const int64_t value = v->get<int64_t>();
  if (value < lo || value > hi) {
    bad_request(name, quoted + " must be in [" + std::to_string(lo) + ", " +
                          (hi == std::numeric_limits<int64_t>::max() ? std::string("inf") : std::to_string(hi)) +
                          "], got " + std::to_string(value));
  }
  return value;
}

// A finite number in [lo, hi] (lo excluded when lo_open).
std::optional<double> get_number(const json& body, const char* name, double lo, double hi, bool lo_open) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  const std::string quoted = std::string("'") + name + "'";
  if (!v->is_number()) bad_request(name, quoted + " must be a number");
  const double value = v->get<double>();
  const bool ok = std::isfinite(value) && (lo_open ? value > lo : value >= lo) && value <= hi;
  if (!ok) {
    const std::string range = std::string(lo_open ? "(" : "[") + json(lo).dump() + ", " +
                              (std::isinf(hi) ? std::string("inf") : json(hi).dump()) + "]";
    bad_request(name, quoted + " must be in " + range + ", got " + v->dump());
  }
  return value;
}

int32_t token_id(const json& v, const char* param) {
  if (!v.is_number_integer()) bad_request(param, std::string("'") + param + "' must hold integer token ids");
  if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())
                             : (v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())) {
    bad_request(param, std::string("'") + param + "' holds token id " + v.dump() + ", out of range");
  }
  return v.get<int32_t>();
}

std::vector<int32_t> token_ids(const json& array, const char* param) {
  std::vector<int32_t> ids;
  ids.reserve(array.size());
  for (const json& v : array) ids.push_back(token_id(v, param));
  return ids;
}

std::vector<std::string> stop_strings(const json& body, const char* name) {
  const json* v = field(body, name);
  if (v == nullptr) return {};
  const std::string quoted = std::string("'") + name + "'";
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const json& s : *v) {
      if (!s.is_string()) bad_request(name, quoted + " must be a string or a list of strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    bad_request(name, quoted + " must be a string or a list of strings");
  }
  // Every generated token is checked against the stop strings' text: their count and size bound that work.
  // OpenAI allows 4; these limits leave room for agents that stop on many markers.
  constexpr size_t kMaxStopStrings = 64, kMaxStopBytes = 4096;
  if (out.size() > kMaxStopStrings) {
    bad_request(name, quoted + " may list at most " + std::to_string(kMaxStopStrings) + " strings, got " +
                            std::to_string(out.size()));
  }
  for (const std::string& s : out) {
    if (s.empty()) bad_request(name, quoted + " strings must not be empty");
    if (s.size() > kMaxStopBytes) {
      bad_request(name, quoted + " strings may be at most " + std::to_string(kMaxStopBytes) + " bytes long, got " +
                              std::to_string(s.size()));
    }
  }
  return out;
}

std::vector<std::pair<int32_t, float>> logit_bias(const json& body) {
  const json* v = field(body, "logit_bias");
  if (v == nullptr) return {};
  if (!v->is_object()) bad_request("logit_bias", "'logit_bias' must be an object mapping token ids to biases");
  std::vector<std::pair<int32_t, float>> out;
  for (const auto& [key, bias] : v->items()) {
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != key.size() || key.empty() || id < 0 || id > std::numeric_limits<int32_t>::max()) {
      bad_request("logit_bias", "'logit_bias' keys must be token ids, got \"" + key + "\"");
    }
    if (!bias.is_number() || !(bias.get<double>() >= -100 && bias.get<double>() <= 100)) {
      bad_request("logit_bias", "'logit_bias' values must be numbers in [-100, 100]");
    }
    out.emplace_back(static_cast<int32_t>(id), bias.get<float>());
  }
  return out;
}

}  // namespace tide::server
