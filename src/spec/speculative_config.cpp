#include "spec/speculative_config.h"

#include <nlohmann/json.hpp>

#include <stdexcept>

#include "spec/ngram_index.h"

namespace tide::spec {
namespace {

using json = nlohmann::json;

[[noreturn]] void refuse(const std::string& what) { throw std::invalid_argument("speculative config: " + what); }

int integer_in(const json& object, const char* key, int lo, int hi) {
  const json& v = object.at(key);
  if (!v.is_number_integer()) refuse(std::string(key) + " must be an integer, got " + v.dump());
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi) {
    refuse(std::string(key) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
           std::to_string(n));
  }
  return static_cast<int>(n);
}

}  // namespace

const char* method_name(SpeculativeConfig::Method method) {
  return method == SpeculativeConfig::Method::kNgram ? "ngram" : "draft_model";
}

SpeculativeConfig SpeculativeConfig::parse(std::string_view json_text) {
  json object;
  try {
    object = json::parse(json_text);
  } catch (const json::parse_error& e) {
    refuse(std::string("not valid JSON: ") + e.what());
  }
  if (!object.is_object()) refuse("expected a JSON object, got " + object.dump());
  for (const auto& [key, value] : object.items()) {
    if (key != "method" && key != "num_speculative_tokens" && key != "prompt_lookup_min" &&
        key != "prompt_lookup_max" && key != "model" && key != "disable_by_batch_size") {
      refuse("unknown key '" + key +
             "' (accepted: method, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, model, "
             "disable_by_batch_size)");
    }
  }
  SpeculativeConfig c;
  if (object.contains("method")) {
    const json& m = object.at("method");
    if (!m.is_string()) refuse("method must be a string, got " + m.dump());
    const std::string name = m.get<std::string>();
    if (name == "ngram") {
      c.method = Method::kNgram;
    } else if (name == "draft_model") {
      c.method = Method::kDraftModel;
    } else {
      refuse("method '" + name + "' is not supported (ngram, draft_model)");
    }
  } else if (object.contains("model")) {
    c.method = Method::kDraftModel;
  } else {
    refuse("method is required (ngram, or draft_model with model)");
  }
  if (!object.contains("num_speculative_tokens")) refuse("num_speculative_tokens is required");
  c.num_speculative_tokens = integer_in(object, "num_speculative_tokens", 1, kMaxSpeculativeTokens);

  if (object.contains("disable_by_batch_size")) {
    c.disable_by_batch_size = integer_in(object, "disable_by_batch_size", 2, kMaxDisableByBatchSize);
  }

  const bool has_min = object.contains("prompt_lookup_min"), has_max = object.contains("prompt_lookup_max");
  if (c.method == Method::kNgram) {
    if (object.contains("model")) refuse("model is for method draft_model, not ngram");
    c.prompt_lookup_max = has_max ? integer_in(object, "prompt_lookup_max", 1, NgramIndex::kMaxN)
                                  : (has_min ? 0 : kDefaultLookupMax);
    c.prompt_lookup_min = has_min ? integer_in(object, "prompt_lookup_min", 1, NgramIndex::kMaxN)
                                  : (has_max ? c.prompt_lookup_max : kDefaultLookupMin);
    if (!has_max && has_min) c.prompt_lookup_max = c.prompt_lookup_min;  // one bound given: both
    if (c.prompt_lookup_min > c.prompt_lookup_max) {
      refuse("prompt_lookup_min (" + std::to_string(c.prompt_lookup_min) + ") is greater than prompt_lookup_max (" +
             std::to_string(c.prompt_lookup_max) + ")");
    }
  } else {
    if (has_min || has_max) refuse("prompt_lookup_min and prompt_lookup_max are for method ngram");
    if (!object.contains("model")) refuse("model is required for method draft_model");
    const json& m = object.at("model");
    if (!m.is_string() || m.get<std::string>().empty()) refuse("model must be a non-empty path, got " + m.dump());
    c.model = m.get<std::string>();
  }
  return c;
}

}  // namespace tide::spec
