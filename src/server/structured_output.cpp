#include "server/structured_output.h"

#include "server/api_error.h"
#include "server/request_fields.h"

namespace tide::server {
namespace {

StructuredOutput schema_output(const json& schema, const std::string& field) {
  // vLLM accepts the schema as an object or as its JSON text.
  json parsed = schema;
  if (schema.is_string()) {
    parsed = json::parse(schema.get<std::string>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) bad_request(field, "'" + field + "' holds a string that is not JSON");
  }
  if (!parsed.is_object() && !parsed.is_boolean()) bad_request(field, "'" + field + "' must be a JSON Schema object");
  StructuredOutput out;
  out.kind = StructuredOutput::Kind::kJsonSchema;
  out.schema = std::move(parsed);
  out.field = field;
  return out;
}

StructuredOutput text_output(StructuredOutput::Kind kind, const json& value, const std::string& field) {
  if (!value.is_string() || value.get_ref<const std::string&>().empty()) {
    bad_request(field, "'" + field + "' must be a non-empty string");
  }
  StructuredOutput out;
  out.kind = kind;
  out.text = value.get<std::string>();
  out.field = field;
  return out;
}

StructuredOutput choice_output(const json& value, const std::string& field) {
  if (!value.is_array() || value.empty()) bad_request(field, "'" + field + "' must be a non-empty list of strings");
  StructuredOutput out;
  out.kind = StructuredOutput::Kind::kChoice;
  out.field = field;
  for (const json& c : value) {
    if (!c.is_string()) bad_request(field, "'" + field + "' must be a non-empty list of strings");
    out.choices.push_back(c.get<std::string>());
  }
  return out;
}

StructuredOutput json_object_output(const std::string& field) {
  StructuredOutput out;
  out.kind = StructuredOutput::Kind::kJsonObject;
  out.field = field;
  return out;
}

std::optional<StructuredOutput> from_response_format(const json& body) {
  const json* rf = field(body, "response_format");
  if (rf == nullptr) return std::nullopt;
  if (!rf->is_object()) bad_request("response_format", "'response_format' must be an object");
  const std::string type = rf->value("type", std::string());
  if (type == "text") return std::nullopt;
  if (type == "json_object") return json_object_output("response_format");
  if (type == "json_schema") {
    const json* js = field(*rf, "json_schema");
    if (js == nullptr || !js->is_object()) {
      bad_request("response_format", "response_format json_schema needs 'json_schema': {\"name\", \"schema\", \"strict\"?}");
    }
    const json* schema = field(*js, "schema");
    // OpenAI: no schema means any JSON object.
    if (schema == nullptr) return json_object_output("response_format");
    StructuredOutput out = schema_output(*schema, "response_format");
    if (const json* strict = field(*js, "strict"); strict != nullptr && !strict->is_boolean()) {
      bad_request("response_format", "'response_format.json_schema.strict' must be a boolean");
    }
    return out;
  }
  bad_request("response_format", "'response_format.type' must be text, json_object or json_schema");
}

std::optional<StructuredOutput> from_structured_outputs(const json& body) {
  const json* so = field(body, "structured_outputs");
  if (so == nullptr) return std::nullopt;
  if (!so->is_object()) bad_request("structured_outputs", "'structured_outputs' must be an object");
  std::optional<StructuredOutput> out;
  auto set = [&](StructuredOutput value) {
    if (out) bad_request("structured_outputs", "'structured_outputs' may hold one of json, regex, choice, grammar, json_object");
    out = std::move(value);
  };
  if (const json* v = field(*so, "json")) set(schema_output(*v, "structured_outputs"));
  if (const json* v = field(*so, "regex")) set(text_output(StructuredOutput::Kind::kRegex, *v, "structured_outputs"));
  if (const json* v = field(*so, "choice")) set(choice_output(*v, "structured_outputs"));
  if (const json* v = field(*so, "grammar")) set(text_output(StructuredOutput::Kind::kGrammar, *v, "structured_outputs"));
  if (get_bool(*so, "json_object") == true) set(json_object_output("structured_outputs"));
  return out;
}

}  // namespace

std::optional<StructuredOutput> parse_structured_output(const json& body) {
  std::vector<StructuredOutput> found;
  if (auto rf = from_response_format(body)) found.push_back(std::move(*rf));
  if (auto so = from_structured_outputs(body)) found.push_back(std::move(*so));
  if (const json* v = field(body, "guided_json")) found.push_back(schema_output(*v, "guided_json"));
  if (const json* v = field(body, "guided_regex")) found.push_back(text_output(StructuredOutput::Kind::kRegex, *v, "guided_regex"));
  if (const json* v = field(body, "guided_choice")) found.push_back(choice_output(*v, "guided_choice"));
  if (const json* v = field(body, "guided_grammar")) {
    found.push_back(text_output(StructuredOutput::Kind::kGrammar, *v, "guided_grammar"));
  }
  if (found.empty()) return std::nullopt;
  if (found.size() > 1) {
    bad_request(found[1].field, "'" + found[0].field + "' and '" + found[1].field +
                                    "' both constrain the output; give one");
  }
  return std::move(found[0]);
}

std::optional<StructuredOutput> parse_cohere_response_format(const json& body) {
  const json* rf = field(body, "response_format");
  if (rf == nullptr) return std::nullopt;
  if (!rf->is_object()) bad_request("response_format", "'response_format' must be an object");
  std::string type = rf->value("type", std::string());
  for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (type == "text") return std::nullopt;
  if (type != "json_object") bad_request("response_format", "'response_format.type' must be text or json_object");
  if (const json* schema = field(*rf, "json_schema")) return schema_output(*schema, "response_format");
  return json_object_output("response_format");
}

}  // namespace tide::server
