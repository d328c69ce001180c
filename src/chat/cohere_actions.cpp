// The body of a Cohere action block as tool calls (see cohere_output_detail.h), and the small text helpers the
// Cohere output parser shares.
#include <nlohmann/json.hpp>

#include "chat/cohere_output_detail.h"

namespace tide::cohere {

namespace {

// Action lists are flat (a list of calls, each with its parameters); anything nested deeper than this is refused
// rather than handed to nlohmann's recursive copies and dumps.
constexpr int kMaxActionDepth = 128;

bool is_json_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::size_t skip_blanks(std::string_view text, std::size_t i) {
  while (i < text.size() && is_json_blank(text[i])) ++i;
  return i;
}

// Past the end of the JSON string that starts at text[i] == '"'.
std::size_t skip_string(std::string_view text, std::size_t i) {
  for (++i; i < text.size(); ++i) {
    if (text[i] == '\\') {
      ++i;
    } else if (text[i] == '"') {
      return i + 1;
    }
  }
  return text.size();
}

// Past the end of the JSON value that starts at text[i]; the text is known to be valid JSON.
std::size_t skip_value(std::string_view text, std::size_t i) {
  if (i >= text.size()) return text.size();
  if (text[i] == '"') return skip_string(text, i);
  if (text[i] == '{' || text[i] == '[') {
    int depth = 0;
    while (i < text.size()) {
      const char c = text[i];
      if (c == '"') {
        i = skip_string(text, i);
        continue;
      }
      if (c == '{' || c == '[') ++depth;
      if ((c == '}' || c == ']') && --depth == 0) return i + 1;
      ++i;
    }
    return text.size();
  }
  while (i < text.size() && !is_json_blank(text[i]) && text[i] != ',' && text[i] != '}' && text[i] != ']') ++i;
  return i;
}

// For each element of the (valid) JSON list `text`, the exact text of its "parameters" value when the element is
// an object that has one (the last one, as nlohmann keeps the last of duplicate keys).
std::vector<std::optional<std::string_view>> parameter_texts(std::string_view text) {
  std::vector<std::optional<std::string_view>> params;
  std::size_t i = skip_blanks(text, 0);
  if (i >= text.size() || text[i] != '[') return params;
  i = skip_blanks(text, i + 1);
  while (i < text.size() && text[i] != ']') {
    std::optional<std::string_view> found;
    if (text[i] == '{') {
      i = skip_blanks(text, i + 1);
      while (i < text.size() && text[i] == '"') {
        const std::size_t key_end = skip_string(text, i);
        const auto key = nlohmann::json::parse(text.substr(i, key_end - i), nullptr, false);
        i = skip_blanks(text, key_end);
        if (i < text.size() && text[i] == ':') i = skip_blanks(text, i + 1);
        const std::size_t value_end = skip_value(text, i);
        if (key.is_string() && key.get_ref<const std::string&>() == "parameters") {
          found = text.substr(i, value_end - i);
        }
        i = skip_blanks(text, value_end);
        if (i < text.size() && text[i] == ',') i = skip_blanks(text, i + 1);
      }
      ++i;  // the object's '}'
    } else {
      i = skip_value(text, i);
    }
    params.push_back(found);
    i = skip_blanks(text, i);
    if (i < text.size() && text[i] == ',') i = skip_blanks(text, i + 1);
  }
  return params;
}

}  // namespace

int64_t count_code_points(std::string_view text) {
  int64_t count = 0;
  for (const char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

std::size_t char_start_at_or_before(std::string_view text, std::size_t pos, std::size_t floor) {
  while (pos > floor && pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) --pos;
  return pos;
}

bool json_depth_within(std::string_view text, int max_depth) {
  int depth = 0;
  JsonStringTracker json;
  for (const char c : text) {
    if (!json.outside(c)) continue;
    if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

std::optional<std::vector<ParsedToolCall>> parse_action_list(std::string_view body) {
  if (!json_depth_within(body, kMaxActionDepth)) return std::nullopt;
  const auto list = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (list.is_discarded() || !list.is_array() || list.empty()) return std::nullopt;
  const auto params = parameter_texts(body);
  if (params.size() != list.size()) return std::nullopt;  // cannot happen for a valid list; never trust it blindly
  std::vector<ParsedToolCall> calls;
  for (std::size_t k = 0; k < list.size(); ++k) {
    const auto& call = list[k];
    if (!call.is_object()) return std::nullopt;
    const auto name = call.find("tool_name");
    if (name == call.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
    const auto parameters = call.find("parameters");
    const bool has_parameters = parameters != call.end() && !parameters->is_null();
    if (has_parameters && !parameters->is_object()) return std::nullopt;
    if (has_parameters && !params[k]) return std::nullopt;  // as above: the scan and the parse must agree
    ParsedToolCall parsed;
    parsed.name = name->get<std::string>();
    parsed.arguments = has_parameters ? std::string(*params[k]) : "{}";
    const auto id = call.find("tool_call_id");
    if (id != call.end() && !id->is_null()) {
      parsed.model_call_id = id->is_string() ? id->get<std::string>() : id->dump();
    }
    calls.push_back(std::move(parsed));
  }
  return calls;
}

}  // namespace tide::cohere
