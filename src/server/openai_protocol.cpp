#include "server/openai_protocol.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "runtime/sampling.h"
#include "server/api_error.h"

namespace tide::server {
namespace {

// Bodies keep the client's key order (tools and their parameters reach the chat template as sent).
using json = nlohmann::ordered_json;

constexpr int kMaxNestingDepth = 64;  // deeper bodies are refused (no template should walk them)
constexpr int kMaxLogprobs = 20;      // vLLM's limit

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
std::optional<double> get_number(const json& body, const char* name, double lo, double hi, bool lo_open = false) {
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

std::vector<std::string> stop_strings(const json& body) {
  const json* v = field(body, "stop");
  if (v == nullptr) return {};
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const json& s : *v) {
      if (!s.is_string()) bad_request("stop", "'stop' must be a string or a list of strings");
      out.push_back(s.get<std::string>());
    }
  } else {
    bad_request("stop", "'stop' must be a string or a list of strings");
  }
  // Every generated token is checked against the stop strings' text: their count and size bound that work.
  // OpenAI allows 4; these limits leave room for agents that stop on many markers.
  constexpr size_t kMaxStopStrings = 64, kMaxStopBytes = 4096;
  if (out.size() > kMaxStopStrings) {
    bad_request("stop", "'stop' may list at most " + std::to_string(kMaxStopStrings) + " strings, got " +
                            std::to_string(out.size()));
  }
  for (const std::string& s : out) {
    if (s.empty()) bad_request("stop", "'stop' strings must not be empty");
    if (s.size() > kMaxStopBytes) {
      bad_request("stop", "'stop' strings may be at most " + std::to_string(kMaxStopBytes) + " bytes long, got " +
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

// The fields completions and chat share.
void parse_common(const json& body, GenerationRequest& r) {
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  r.model = get_string(body, "model");
  r.stream = get_bool(body, "stream").value_or(false);
  r.return_tokens_as_token_ids = get_bool(body, "return_tokens_as_token_ids").value_or(false);
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad_request("stream_options", "'stream_options' must be an object");
    if (!r.stream) bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
    r.include_usage = get_bool(*so, "include_usage").value_or(false);
  }
  GenerateOptions& o = r.options;
  SamplingParams& s = o.sampling;
  s.temperature = get_number(body, "temperature", 0, 2).value_or(1.0);  // OpenAI's default: 1
  // Bounds in the f32 the sample op computes with (runtime/sampling.h).
  s.top_p = get_number(body, "top_p", kMinSamplingValue, 1).value_or(1.0);
  // vLLM: -1 or 0 turn top_k off.
  s.top_k = std::max<int64_t>(0, get_int(body, "top_k", -1, std::numeric_limits<int32_t>::max()).value_or(0));
  s.min_p = get_number(body, "min_p", 0, 1).value_or(0.0);
  s.presence_penalty = get_number(body, "presence_penalty", -2, 2).value_or(0.0);
  s.frequency_penalty = get_number(body, "frequency_penalty", -2, 2).value_or(0.0);
  s.repetition_penalty =
      get_number(body, "repetition_penalty", kMinSamplingValue, kMaxSamplingValue).value_or(1.0);
  if (const auto seed = get_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*seed);
  }
  s.logit_bias = logit_bias(body);
  try {
    s.validate();  // what the bounds above cannot say: logit_bias duplicates ("1" and "01"), temperature in f32
  } catch (const ParameterError& e) {
    bad_request(e.param(), e.what());
  }
  o.n = static_cast<int>(get_int(body, "n", 1, kMaxSamplesPerRequest).value_or(1));
  if (const json* best_of = field(body, "best_of")) {
    if (!best_of->is_number_integer() || best_of->get<int64_t>() != o.n) {
      bad_request("best_of", "'best_of' is not supported (only best_of == n)");
    }
  }
  o.min_tokens = get_int(body, "min_tokens", 0, std::numeric_limits<int64_t>::max()).value_or(0);
  o.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  o.skip_special_tokens = get_bool(body, "skip_special_tokens").value_or(true);
  o.include_stop_str_in_output = get_bool(body, "include_stop_str_in_output").value_or(false);
  o.stop = stop_strings(body);
  if (const json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) bad_request("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    o.stop_token_ids = token_ids(*ids, "stop_token_ids");
  }
  if (const auto user = field(body, "user"); user != nullptr && !user->is_string()) {
    bad_request("user", "'user' must be a string");
  }
  if (const json* rf = field(body, "response_format")) {
    if (!rf->is_object() || rf->value("type", json()) != "text") {
      bad_request("response_format", "only response_format {\"type\": \"text\"} is supported");
    }
  }
}

void check_max_tokens(GenerationRequest& r) {
  if (r.max_tokens && r.options.min_tokens > *r.max_tokens) {
    bad_request("min_tokens", "'min_tokens' must not exceed 'max_tokens'");
  }
}

// Every depth of `body` is at most kMaxNestingDepth.
json parse_bounded(std::string_view body) {
  const json::parser_callback_t limit = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxNestingDepth) {
      throw ApiError(400, "the request body nests deeper than " + std::to_string(kMaxNestingDepth) + " levels");
    }
    return true;
  };
  return json::parse(body.begin(), body.end(), limit);
}

// A parser's message without its internal prefix and its echo of the token read (which can be the whole body),
// with a short excerpt of the body around the error instead.
std::string describe_parse_error(const json::parse_error& e, std::string_view body) {
  std::string message = e.what();
  if (const size_t close = message.find("] "); message.rfind("[json.exception", 0) == 0 && close != std::string::npos) {
    message.erase(0, close + 2);
  }
  if (const size_t last = message.find("; last read:"); last != std::string::npos) message.resize(last);
  const size_t at = std::min(body.size(), e.byte > 0 ? static_cast<size_t>(e.byte - 1) : size_t{0});
  const size_t begin = at > 40 ? at - 40 : 0;
  const std::string_view excerpt = body.substr(begin, std::min<size_t>(60, body.size() - begin));
  std::string shown;
  for (const char ch : excerpt) {
    const auto c = static_cast<unsigned char>(ch);
    shown += c < 0x20 || c == 0x7f ? fmt::format("\\x{:02x}", c) : std::string(1, ch);
  }
  return fmt::format("{} (near byte {}: {}'{}'{})", message, at, begin > 0 ? "..." : "", shown,
                     begin + excerpt.size() < body.size() ? "..." : "");
}

}  // namespace

json parse_body(std::string_view body) {
  if (body.empty()) bad_request("", "the request body is empty; expected a JSON object");
  try {
    return parse_bounded(body);
  } catch (const json::parse_error& e) {
    bad_request("", "invalid JSON in the request body: " + describe_parse_error(e, body));
  } catch (const json::exception& e) {
    bad_request("", std::string("invalid JSON in the request body: ") + e.what());
  }
}

CompletionRequest parse_completion_request(const json& body) {
  CompletionRequest r;
  parse_common(body, r);
  r.max_tokens = get_int(body, "max_tokens", 0, std::numeric_limits<int32_t>::max());
  r.echo = get_bool(body, "echo").value_or(false);
  if (const json* lp = field(body, "logprobs")) {
    if (!lp->is_number_integer()) bad_request("logprobs", "'logprobs' must be an integer in [0, 20]");
    r.options.logprobs = static_cast<int>(get_int(body, "logprobs", 0, kMaxLogprobs).value());
  }
  if (const auto suffix = get_string(body, "suffix"); suffix && !suffix->empty()) {
    bad_request("suffix", "'suffix' is not supported");
  }
  const json* prompt = field(body, "prompt");
  if (prompt == nullptr) bad_request("prompt", "'prompt' is required");
  const char* kShape = "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of token ids";
  if (prompt->is_string()) {
    r.prompts.push_back({prompt->get<std::string>(), {}});
  } else if (prompt->is_array()) {
    if (prompt->empty()) bad_request("prompt", "'prompt' must not be empty");
    const json& first = prompt->front();
    for (const json& p : *prompt) {
      if (first.is_string() && p.is_string()) {
        r.prompts.push_back({p.get<std::string>(), {}});
      } else if (first.is_number() && p.is_number()) {
        // handled below as one prompt of ids
      } else if (first.is_array() && p.is_array()) {
        if (p.empty()) bad_request("prompt", "'prompt' holds an empty list of token ids");
        r.prompts.push_back({std::nullopt, token_ids(p, "prompt")});
      } else {
        bad_request("prompt", kShape);
      }
    }
    if (first.is_number()) r.prompts.push_back({std::nullopt, token_ids(*prompt, "prompt")});
  } else {
    bad_request("prompt", kShape);
  }
  check_max_tokens(r);
  return r;
}

namespace {

// `messages` with each content given as a string (text parts joined by newlines) or null.
json normalize_messages(const json& body) {
  const json* messages = field(body, "messages");
  if (messages == nullptr) bad_request("messages", "'messages' is required");
  if (!messages->is_array() || messages->empty()) bad_request("messages", "'messages' must be a non-empty list");
  json out = json::array();
  for (const json& m : *messages) {
    if (!m.is_object()) bad_request("messages", "each message must be an object");
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) bad_request("messages", "each message needs a 'role' string");
    json message = m;
    const auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      message["content"] = nullptr;
    } else if (content->is_array()) {
      std::string text;
      for (const json& part : *content) {
        if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          bad_request("messages", "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
        }
        if (!text.empty()) text += "\n";
        text += part["text"].get<std::string>();
      }
      message["content"] = text;
    } else if (!content->is_string()) {
      bad_request("messages", "a message's 'content' must be a string, a list of text parts or null");
    }
    out.push_back(std::move(message));
  }
  return out;
}

json optional_array(const json& body, const char* name) {
  const json* v = field(body, name);
  if (v == nullptr) return nullptr;
  if (!v->is_array()) bad_request(name, std::string("'") + name + "' must be a list");
  return *v;
}

void parse_chat_fields(const json& body, ChatRequest& r) {
  r.messages = normalize_messages(body);
  r.add_generation_prompt = get_bool(body, "add_generation_prompt").value_or(true);
  r.tools = optional_array(body, "tools");
  r.documents = optional_array(body, "documents");
  if (const json* kwargs = field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.chat_template_kwargs = *kwargs;
  }
}

}  // namespace

ChatRequest parse_chat_request(const json& body) {
  ChatRequest r;
  parse_common(body, r);
  parse_chat_fields(body, r);
  r.max_tokens = get_int(body, "max_completion_tokens", 0, std::numeric_limits<int32_t>::max());
  if (!r.max_tokens) r.max_tokens = get_int(body, "max_tokens", 0, std::numeric_limits<int32_t>::max());
  const bool logprobs = get_bool(body, "logprobs").value_or(false);
  const std::optional<int64_t> top = get_int(body, "top_logprobs", 0, kMaxLogprobs);
  if (top && !logprobs) bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  if (logprobs) {
    r.top_logprobs = static_cast<int>(top.value_or(0));
    r.options.logprobs = r.top_logprobs;
  }
  check_max_tokens(r);
  return r;
}

TokenizeRequest parse_tokenize_request(const json& body) {
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  TokenizeRequest r;
  r.model = get_string(body, "model");
  r.add_special_tokens = get_bool(body, "add_special_tokens").value_or(true);
  if (field(body, "messages") != nullptr) {
    ChatRequest chat;
    parse_chat_fields(body, chat);
    r.chat = std::move(chat);
    r.add_special_tokens = get_bool(body, "add_special_tokens").value_or(false);
  } else {
    r.prompt = get_string(body, "prompt");
    if (!r.prompt) bad_request("prompt", "'prompt' (a string) or 'messages' is required");
  }
  return r;
}

DetokenizeRequest parse_detokenize_request(const json& body) {
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  DetokenizeRequest r;
  r.model = get_string(body, "model");
  const json* tokens = field(body, "tokens");
  if (tokens == nullptr || !tokens->is_array()) bad_request("tokens", "'tokens' (a list of token ids) is required");
  r.tokens = token_ids(*tokens, "tokens");
  return r;
}

}  // namespace tide::server
