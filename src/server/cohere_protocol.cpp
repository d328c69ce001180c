#include "server/cohere_protocol.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "runtime/sampling.h"
#include "server/api_error.h"
#include "server/request_fields.h"

namespace tide::server {
namespace {

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::toupper(c); });
  return text;
}

// Content given as a list of text parts, joined by newlines; a string as it is.
json joined_text(const json& content, const char* role) {
  if (content.is_string() || content.is_null()) return content;
  if (!content.is_array()) bad_request("messages", std::string("a ") + role + " message's content must be a string or a list");
  std::string text;
  bool first = true;
  for (const json& part : content) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") || !part["text"].is_string()) {
      bad_request("messages", std::string("a ") + role + " message's content parts must be {\"type\": \"text\", \"text\": ...}");
    }
    if (!first) text += "\n";
    text += part["text"].get<std::string>();
    first = false;
  }
  return text;
}

// A tool message's content parts as its results: a document part's data, a text part's text.
json tool_results(const json& content) {
  if (content.is_string() || content.is_null()) return content;
  if (!content.is_array()) bad_request("messages", "a tool message's content must be a string or a list");
  json results = json::array();
  for (const json& part : content) {
    const std::string type = part.is_object() ? part.value("type", std::string()) : std::string();
    if (type == "text" && part.contains("text") && part["text"].is_string()) {
      results.push_back(part["text"]);
    } else if (type == "document" && part.contains("document") && part["document"].is_object() &&
               part["document"].contains("data")) {
      results.push_back(part["document"]["data"]);
    } else {
      bad_request("messages", "a tool message's content parts must be text or document parts");
    }
  }
  return results;
}

json cohere_messages(const json& body) {
  const json* messages = field(body, "messages");
  if (messages == nullptr) bad_request("messages", "'messages' is required");
  if (!messages->is_array() || messages->empty()) bad_request("messages", "'messages' must be a non-empty list");
  json out = json::array();
  for (const json& m : *messages) {
    if (!m.is_object()) bad_request("messages", "each message must be an object");
    const std::string role = m.value("role", std::string());
    json message = {{"role", role}};
    if (role == "user" || role == "system") {
      message["content"] = joined_text(m.value("content", json()), role.c_str());
    } else if (role == "assistant") {
      if (const json* content = field(m, "content")) message["content"] = joined_text(*content, "assistant");
      if (const json* plan = field(m, "tool_plan")) message["tool_plan"] = *plan;
      if (const json* calls = field(m, "tool_calls")) {
        if (!calls->is_array()) bad_request("messages", "an assistant message's 'tool_calls' must be a list");
        json converted = *calls;
        for (json& call : converted) {
          if (!call.is_object()) bad_request("messages", "each tool call must be an object");
          arguments_as_object(call);
        }
        message["tool_calls"] = std::move(converted);
      }
    } else if (role == "tool") {
      const json* id = field(m, "tool_call_id");
      if (id == nullptr || !id->is_string()) bad_request("messages", "a tool message needs a 'tool_call_id' string");
      message["tool_call_id"] = *id;
      message["content"] = tool_results(m.value("content", json()));
    } else {
      bad_request("messages", "a message's role must be user, system, assistant or tool, got '" + role + "'");
    }
    out.push_back(std::move(message));
  }
  return out;
}

// Documents for the template (strings, or the data of {"id", "data"}) and for citations (with their ids).
void cohere_documents(const json& body, ChatRequest& r) {
  const json* docs = field(body, "documents");
  if (docs == nullptr) return;
  if (!docs->is_array()) bad_request("documents", "'documents' must be a list");
  r.documents = json::array();
  r.citation_documents = json::array();
  for (size_t i = 0; i < docs->size(); ++i) {
    const json& doc = (*docs)[i];
    if (doc.is_string()) {
      r.documents.push_back(doc);
      r.citation_documents.push_back({{"id", "doc:" + std::to_string(i)}, {"text", doc}});
      continue;
    }
    const json* data = doc.is_object() ? field(doc, "data") : nullptr;
    if (data == nullptr || !(data->is_object() || data->is_string())) {
      bad_request("documents", "each document must be a string or {\"id\"?: string, \"data\": object or string}");
    }
    r.documents.push_back(*data);
    json cited = data->is_object() ? *data : json{{"text", *data}};
    const json* id = field(doc, "id");
    if (id != nullptr && !id->is_string()) bad_request("documents", "a document's 'id' must be a string");
    cited["id"] = id ? *id : json("doc:" + std::to_string(i));
    r.citation_documents.push_back(std::move(cited));
  }
}

void refuse_unsupported(const json& body) {
  if (const json* choice = field(body, "tool_choice")) {
    if (!choice->is_string() || (upper(choice->get<std::string>()) != "NONE" && upper(choice->get<std::string>()) != "REQUIRED")) {
      bad_request("tool_choice", "'tool_choice' must be REQUIRED or NONE");
    }
  }
  if (get_bool(body, "logprobs") == true) bad_request("logprobs", "'logprobs' is not supported on /v2/chat");
}

}  // namespace

ChatRequest parse_cohere_chat_request(const json& body) {
  if (!body.is_object()) bad_request("", "the request body must be a JSON object");
  refuse_unsupported(body);
  ChatRequest r;
  r.model = get_string(body, "model");
  r.stream = get_bool(body, "stream").value_or(false);
  r.messages = cohere_messages(body);
  r.tools = parse_tools(body);
  const json* choice = field(body, "tool_choice");
  r.tool_choice = r.tools.is_null() ? "none" : choice == nullptr ? "auto" : upper(choice->get<std::string>()) == "NONE" ? "none" : "required";
  if (choice != nullptr && r.tool_choice == "none" && upper(choice->get<std::string>()) == "REQUIRED") {
    bad_request("tool_choice", "'tool_choice' REQUIRED needs 'tools'");
  }
  r.strict_tools = get_bool(body, "strict_tools").value_or(false);
  cohere_documents(body, r);

  json& kwargs = r.chat_template_kwargs;
  if (const json* options = field(body, "citation_options")) {
    if (!options->is_object()) bad_request("citation_options", "'citation_options' must be an object");
    const std::string mode = upper(get_string(*options, "mode").value_or("ACCURATE"));
    if (mode != "FAST" && mode != "ACCURATE" && mode != "OFF" && mode != "ENABLED" && mode != "DISABLED") {
      bad_request("citation_options", "'citation_options.mode' must be FAST, ACCURATE, OFF, ENABLED or DISABLED");
    }
    r.citations = mode != "OFF" && mode != "DISABLED";
  } else {
    r.citations = true;  // Cohere's default
  }
  kwargs["enable_citations"] = r.citations;
  if (const auto safety = get_string(body, "safety_mode")) {
    const std::string mode = upper(*safety);
    if (mode != "CONTEXTUAL" && mode != "STRICT" && mode != "OFF") {
      bad_request("safety_mode", "'safety_mode' must be CONTEXTUAL, STRICT or OFF");
    }
    kwargs["safety_mode"] = mode;
  }
  if (const json* thinking = field(body, "thinking")) {
    if (!thinking->is_object()) bad_request("thinking", "'thinking' must be an object");
    const std::string type = get_string(*thinking, "type").value_or("enabled");
    if (type != "enabled" && type != "disabled") bad_request("thinking", "'thinking.type' must be enabled or disabled");
    kwargs["reasoning"] = type == "enabled";
    r.thinking_budget = get_int(*thinking, "token_budget", 0, std::numeric_limits<int32_t>::max());
  }

  GenerateOptions& o = r.options;
  SamplingParams& s = o.sampling;
  s.temperature = get_number(body, "temperature", 0, 2).value_or(0.3);  // Cohere's default
  s.top_p = get_number(body, "p", kMinSamplingValue, 1).value_or(0.75);
  s.top_k = get_int(body, "k", 0, 500).value_or(0);
  s.frequency_penalty = get_number(body, "frequency_penalty", 0, 1).value_or(0.0);
  s.presence_penalty = get_number(body, "presence_penalty", 0, 1).value_or(0.0);
  if (const auto seed = get_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*seed);
  }
  try {
    s.validate();
  } catch (const ParameterError& e) {
    bad_request(e.param(), e.what());
  }
  o.stop = stop_strings(body, "stop_sequences");
  r.max_tokens = get_int(body, "max_tokens", 1, std::numeric_limits<int32_t>::max());
  r.structured = parse_cohere_response_format(body);
  // Cohere's templates also tell the model about a JSON response (json_object / json_schema variables).
  if (const json* rf = field(body, "response_format"); r.structured && rf != nullptr) kwargs["response_format"] = *rf;
  return r;
}

std::string cohere_finish_reason(FinishReason reason, bool stopped_by_string, bool tool_calls) {
  switch (reason) {
    case FinishReason::kStop:
      if (tool_calls) return "TOOL_CALL";
      return stopped_by_string ? "STOP_SEQUENCE" : "COMPLETE";
    case FinishReason::kLength:
      return "MAX_TOKENS";
    default:
      return "ERROR";
  }
}

}  // namespace tide::server
