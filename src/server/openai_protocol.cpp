#include "server/openai_protocol.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "chat/json_exact.h"
#include "core/error.h"
#include "runtime/sampling.h"
#include "server/api_error.h"
#include "server/request_fields.h"

namespace tide::server {
namespace {

constexpr int kMaxNestingDepth = 64;  // deeper bodies are refused (no template should walk them)
constexpr int kMaxLogprobs = 20;      // vLLM's limit

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
  // tide's own: false keeps this request out of speculative decoding (`--speculative-config`); its output is the
  // same either way, so this only trades its speed against the drafting and verifying work.
  o.speculative = get_bool(body, "speculative").value_or(true);
  o.skip_special_tokens = get_bool(body, "skip_special_tokens").value_or(true);
  o.include_stop_str_in_output = get_bool(body, "include_stop_str_in_output").value_or(false);
  o.stop = stop_strings(body, "stop");
  if (const json* ids = field(body, "stop_token_ids")) {
    if (!ids->is_array()) bad_request("stop_token_ids", "'stop_token_ids' must be a list of token ids");
    o.stop_token_ids = token_ids(*ids, "stop_token_ids");
  }
  if (const auto user = field(body, "user"); user != nullptr && !user->is_string()) {
    bad_request("user", "'user' must be a string");
  }
  r.structured = parse_structured_output(body);
}

void check_max_tokens(GenerationRequest& r) {
  if (r.max_tokens && r.options.min_tokens > *r.max_tokens) {
    bad_request("min_tokens", "'min_tokens' must not exceed 'max_tokens'");
  }
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
    // Integers of any size stay exact (templates print them as Python does); depth is bounded.
    return parse_json_exact(body, kMaxNestingDepth);
  } catch (const Error& e) {
    bad_request("", std::string("the request body is refused: ") + e.what());
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

// A tool call's arguments as the templates take them: transformers' templates print
// tool_call.function.arguments with tojson and expect an object, while OpenAI clients send a JSON string, so a
// string that holds a JSON object becomes that object (as vLLM does); anything else stays as sent.
void arguments_as_object(json& call) {
  const auto function = call.find("function");
  if (function == call.end() || !function->is_object()) return;
  const auto arguments = function->find("arguments");
  if (arguments == function->end() || !arguments->is_string()) return;
  json parsed;
  try {
    parsed = parse_json_exact(arguments->get_ref<const std::string&>(), kMaxNestingDepth);
  } catch (const std::exception&) {
    return;  // not JSON (or nested too deep): the template gets the string
  }
  if (parsed.is_object()) *arguments = std::move(parsed);
}

namespace {

// `messages` as the template gets them: as sent (content a string, a list of parts, an object or null, absent
// keys absent), but for the arguments of assistant tool calls (arguments_as_object). Checks the shape that
// the service and the parsers rely on: a non-empty list of objects with a string role; tool_calls a list of
// objects.
json chat_messages(const json& body) {
  const json* messages = field(body, "messages");
  if (messages == nullptr) bad_request("messages", "'messages' is required");
  if (!messages->is_array() || messages->empty()) bad_request("messages", "'messages' must be a non-empty list");
  json out = *messages;
  for (json& m : out) {
    if (!m.is_object()) bad_request("messages", "each message must be an object");
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) bad_request("messages", "each message needs a 'role' string");
    const auto content = m.find("content");
    if (content != m.end() && !(content->is_null() || content->is_string() || content->is_array() ||
                                content->is_object())) {
      bad_request("messages", "a message's 'content' must be a string, a list of parts, an object or null");
    }
    // A tool message's list holds its results, whatever they are; other lists are parts, and the models served
    // read text (an assistant's thinking part too), not images or audio.
    if (content != m.end() && content->is_array() && *role != "tool") {
      for (const json& part : *content) {
        const std::string type = part.is_object() ? part.value("type", std::string()) : std::string();
        if (type != "text" && !(type == "thinking" && *role == "assistant")) {
          bad_request("messages", "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported, got " +
                                      (type.empty() ? std::string("a part without a type") : "'" + type + "'"));
        }
      }
    }
    const auto calls = m.find("tool_calls");
    if (calls == m.end() || calls->is_null()) continue;
    if (!calls->is_array()) bad_request("messages", "a message's 'tool_calls' must be a list");
    for (json& call : *calls) {
      if (!call.is_object()) bad_request("messages", "each of a message's 'tool_calls' must be an object");
      arguments_as_object(call);
    }
  }
  return out;
}

json optional_array(const json& body, const char* name) {
  const json* v = field(body, name);
  if (v == nullptr) return nullptr;
  if (!v->is_array()) bad_request(name, std::string("'") + name + "' must be a list");
  return *v;
}

// OpenAI's tools: [{"type": "function", "function": {"name": string, "description"?, "parameters"?}}].
}  // namespace

json parse_tools(const json& body) {
  json tools = optional_array(body, "tools");
  if (tools.is_null()) return tools;
  for (const json& tool : tools) {
    const json* function = tool.is_object() ? field(tool, "function") : nullptr;
    if (function == nullptr || !function->is_object() || !field(*function, "name") ||
        !(*function)["name"].is_string() || tool.value("type", std::string("function")) != "function") {
      bad_request("tools", "each tool must be {\"type\": \"function\", \"function\": {\"name\": ..., ...}}");
    }
  }
  return tools;
}

namespace {

// tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name": ...}} naming a tool.
void parse_tool_choice(const json& body, ChatRequest& r) {
  const json* v = field(body, "tool_choice");
  r.tool_choice = r.tools.is_null() ? "none" : "auto";
  if (v == nullptr) return;
  if (v->is_string() && (*v == "none" || *v == "auto" || *v == "required")) {
    r.tool_choice = v->get<std::string>();
  } else if (v->is_object() && v->value("type", std::string()) == "function" && v->contains("function") &&
             (*v)["function"].is_object() && (*v)["function"].contains("name") && (*v)["function"]["name"].is_string()) {
    r.tool_choice = "function";
    r.tool_choice_function = (*v)["function"]["name"].get<std::string>();
  } else {
    bad_request("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                               "\"function\": {\"name\": ...}}");
  }
  if ((r.tool_choice == "required" || r.tool_choice == "function") && r.tools.is_null()) {
    bad_request("tool_choice", "'tool_choice' \"" + r.tool_choice + "\" needs 'tools'");
  }
}

void parse_chat_fields(const json& body, ChatRequest& r) {
  r.messages = chat_messages(body);
  r.add_generation_prompt = get_bool(body, "add_generation_prompt").value_or(true);
  r.tools = parse_tools(body);
  parse_tool_choice(body, r);
  r.parallel_tool_calls = get_bool(body, "parallel_tool_calls").value_or(true);
  for (const json& tool : r.tools.is_array() ? r.tools : json::array()) {
    if (tool["function"].value("strict", json(false)) == true) r.strict_tools = true;
  }
  r.documents = optional_array(body, "documents");
  if (const json* kwargs = field(body, "chat_template_kwargs")) {
    if (!kwargs->is_object()) bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.chat_template_kwargs = *kwargs;
  }
  r.citations = r.chat_template_kwargs.value("enable_citations", json(false)) == true;
  r.chat_template = get_string(body, "chat_template");
  r.thinking_budget = get_int(body, "thinking_budget", 0, std::numeric_limits<int32_t>::max());
  r.include_reasoning = get_bool(body, "include_reasoning").value_or(true);
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
