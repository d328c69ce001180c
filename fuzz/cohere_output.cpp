// Fuzzes CohereOutputParser (chat/cohere_output.h), which reads what a model generates: untrusted text that a
// streaming server feeds in arbitrary pieces. The input:
//   byte 0      the parse: bit 0 the format (kActions / kLegacyActions), bits 1-4 the options tool_calls,
//               reasoning, citations, starts_in_thinking, bits 5-7 max_held_bytes (kMaxHeld, some small so
//               that the release of oversized blocks and spans runs)
//   byte 1      the split: bits 0-4 how many piece lengths follow, bit 5 the rest fed one character at a time
//   lengths     one byte each: a piece's length in bytes, moved forward to the next character boundary
//   the rest    the generated text, made valid UTF-8 first (invalid bytes become U+FFFD) since the parser is fed
//               whole characters, as the server's detokenizer gives them
// Checked: nothing throws; the deltas over the fuzzed split add up to those of the whole text fed at once;
// every string of every delta is valid UTF-8; tool calls have a name and arguments that are a JSON object;
// citations point at their text in the clean content (or reasoning), in order; options that are off produce
// nothing of their kind; saw_tool_calls() follows the calls returned; after finish() nothing more comes; and
// citation_sources resolves the parsed references against a fixed conversation without throwing.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/cohere_output.h"
#include "chat/json_exact.h"
#include "fuzz/fuzz_util.h"
#include "tokenizer/utf8.h"

namespace {

using tide::CitationRefs;
using tide::CohereDelta;
using tide::CohereOutputParser;
using tide::CohereParseOptions;
using ojson = nlohmann::ordered_json;

// max_held_bytes by bits 5-7 of the first byte: mostly the default, sometimes small enough to be reached.
constexpr std::size_t kDefaultHeld = CohereParseOptions{}.max_held_bytes;
constexpr std::size_t kMaxHeld[8] = {kDefaultHeld, kDefaultHeld, kDefaultHeld, kDefaultHeld, 64, 64, 16, 5};

// Deeper than any action body the parser accepts (it refuses bodies nested deeper than 128).
constexpr int kMaxArgumentsDepth = 256;

// Everything a parser returned, its deltas concatenated.
struct Output {
  std::string reasoning;
  std::string content;
  std::vector<tide::ParsedToolCall> tool_calls;
  std::vector<tide::ParsedCitation> citations;

  bool operator==(const Output&) const = default;
};

bool valid_utf8(std::string_view text) { return tide::utf8::find_invalid(text) == tide::utf8::kValid; }

// The checks that hold for each delta on its own.
void check_delta(const CohereDelta& delta, const CohereParseOptions& options) {
  FUZZ_CHECK(valid_utf8(delta.reasoning));
  FUZZ_CHECK(valid_utf8(delta.content));
  if (!options.reasoning) FUZZ_CHECK(delta.reasoning.empty());
  if (!options.tool_calls) FUZZ_CHECK(delta.tool_calls.empty());
  if (!options.citations) FUZZ_CHECK(delta.citations.empty());
  for (const tide::ParsedToolCall& call : delta.tool_calls) {
    FUZZ_CHECK(!call.name.empty());
    FUZZ_CHECK(valid_utf8(call.name));
    FUZZ_CHECK(valid_utf8(call.model_call_id));
    FUZZ_CHECK(valid_utf8(call.arguments));
    // The exact text of an object: it parses (integers of any size included) and is an object.
    bool object = false;
    const bool parsed = tide::fuzz::accepted(
        [&] { object = tide::parse_json_exact(call.arguments, kMaxArgumentsDepth).is_object(); });
    FUZZ_CHECK(parsed);
    FUZZ_CHECK(object);
  }
  for (const tide::ParsedCitation& citation : delta.citations) {
    FUZZ_CHECK(valid_utf8(citation.text));
    FUZZ_CHECK(!citation.sources.empty());
    for (const auto& [id, indices] : citation.sources) {
      FUZZ_CHECK(!id.empty());
      FUZZ_CHECK(valid_utf8(id));
      for (const int64_t i : indices) FUZZ_CHECK(i >= 0);
    }
  }
}

void append(Output& out, CohereDelta delta) {
  out.reasoning += delta.reasoning;
  out.content += delta.content;
  for (auto& call : delta.tool_calls) out.tool_calls.push_back(std::move(call));
  for (auto& citation : delta.citations) out.citations.push_back(std::move(citation));
}

// Feeds one piece (or finishes, when `piece` is null) and checks the delta and saw_tool_calls().
void step(CohereOutputParser& parser, const std::string_view* piece, const CohereParseOptions& options, Output& out) {
  CohereDelta delta = piece ? parser.feed(*piece) : parser.finish();
  check_delta(delta, options);
  append(out, std::move(delta));
  FUZZ_CHECK(parser.saw_tool_calls() == !out.tool_calls.empty());
}

// After finish(), the parser has nothing more to say.
void check_finished(CohereOutputParser& parser) {
  FUZZ_CHECK(parser.feed("more text <|START_RESPONSE|>x").empty());
  FUZZ_CHECK(parser.finish().empty());
}

// The text as code points (one string each), to index by the citations' code-point offsets.
std::vector<std::string_view> code_points(std::string_view text) {
  std::vector<std::string_view> points;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t start = pos;
    (void)tide::utf8::next_code_point(text, pos);
    points.push_back(text.substr(start, pos - start));
  }
  return points;
}

// Each citation's [start, end) is its text in the clean text of its channel, and a channel's citations come in
// order without overlapping.
void check_citations(const Output& out) {
  const std::vector<std::string_view> content = code_points(out.content);
  const std::vector<std::string_view> reasoning = code_points(out.reasoning);
  int64_t content_end = 0;
  int64_t reasoning_end = 0;
  for (const tide::ParsedCitation& citation : out.citations) {
    const std::vector<std::string_view>& points = citation.in_reasoning ? reasoning : content;
    int64_t& previous_end = citation.in_reasoning ? reasoning_end : content_end;
    FUZZ_CHECK(0 <= citation.start && citation.start <= citation.end);
    FUZZ_CHECK(citation.end <= static_cast<int64_t>(points.size()));
    FUZZ_CHECK(citation.start >= previous_end);
    previous_end = citation.end;
    std::string span;
    for (int64_t i = citation.start; i < citation.end; ++i) span += points[static_cast<std::size_t>(i)];
    FUZZ_CHECK(span == citation.text);
  }
}

// A conversation in the server's (OpenAI) shape with results of every kind, and documents: strings, objects
// with and without ids.
const ojson& conversation() {
  static const ojson messages = ojson::parse(R"([
    {"role": "system", "content": "Be grounded."},
    {"role": "user", "content": "What is up?"},
    {"role": "assistant", "tool_calls": [
      {"id": "call_a", "type": "function", "function": {"name": "search", "arguments": {"q": "up"}}},
      {"id": "call_b", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
      {"type": "function", "function": {"name": "no_id"}},
      {"id": "call_c", "type": "function", "function": {"name": "unanswered"}}]},
    {"role": "tool", "tool_call_id": "call_a",
     "content": [{"title": "r0", "text": "first"}, "plain text", "{\"a\": 1}", 7, [1, 2], null]},
    {"role": "tool", "tool_call_id": "call_b", "content": "{\"x\": [1, 2]}"},
    {"role": "Chatbot", "tool_calls": [{"id": "call_d", "function": {"name": "search"}}]},
    {"role": "tool", "tool_call_id": "call_d", "content": {"direct": "object"}},
    {"role": "tool", "tool_call_id": "call_d", "content": "a second result message"},
    {"role": "tool", "content": "no id"},
    "not a message"
  ])");
  return messages;
}

const ojson& documents() {
  static const ojson docs = ojson::parse(R"([
    "a plain document",
    {"id": "d1", "text": "with an id"},
    {"id": 7, "title": "a numeric id"},
    {"id": null, "text": "a null id"},
    {"text": "no id", "data": {"nested": [1, 2, 3]}},
    12
  ])");
  return docs;
}

// citation_sources over the references never throws, and returns one well-formed, distinct source per reference.
void check_sources(const CitationRefs& refs) {
  for (const ojson* docs : {&documents(), static_cast<const ojson*>(nullptr)}) {
    const ojson sources = tide::citation_sources(conversation(), docs ? *docs : ojson(), refs);
    FUZZ_CHECK(sources.is_array());
    for (const ojson& source : sources) {
      FUZZ_CHECK(source.is_object() && source.contains("type") && source["type"].is_string());
      FUZZ_CHECK(source.contains("id") && source["id"].is_string());
      const std::string type = source["type"].get<std::string>();
      FUZZ_CHECK(type == "document" || type == "tool");
      FUZZ_CHECK(source.contains(type == "document" ? "document" : "tool_output"));
      // The server sends these as JSON: they must dump without throwing.
      (void)tide::dump_json_exact(source, -1, /*replace_invalid_utf8=*/false);
    }
  }
}

// The input's text as valid UTF-8: each maximal invalid part replaced by U+FFFD.
std::string valid_text(std::string_view bytes) {
  std::string text;
  tide::utf8::append_lossy(bytes, /*final=*/true, text);
  return text;
}

// `pos` moved forward to the start of a character (or the end).
std::size_t char_boundary(std::string_view text, std::size_t pos) {
  while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) ++pos;
  return std::min(pos, text.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0];
  const uint8_t split = data[1];
  const tide::CohereFormat format = (mode & 1) ? tide::CohereFormat::kLegacyActions : tide::CohereFormat::kActions;
  CohereParseOptions options;
  options.tool_calls = (mode >> 1) & 1;
  options.reasoning = (mode >> 2) & 1;
  options.citations = (mode >> 3) & 1;
  options.starts_in_thinking = (mode >> 4) & 1;
  options.max_held_bytes = kMaxHeld[mode >> 5];
  const std::size_t lengths = std::min<std::size_t>(split & 0x1F, size - 2);
  const bool rest_by_character = (split >> 5) & 1;
  const std::string text = valid_text(tide::fuzz::as_text(data + 2 + lengths, size - 2 - lengths));

  // The reference: the whole text at once.
  CohereOutputParser whole(format, options);
  Output expected;
  const std::string_view all = text;
  step(whole, &all, options, expected);
  step(whole, nullptr, options, expected);
  check_finished(whole);

  // The fuzzed split: the given pieces, then the rest (whole, or a character at a time).
  CohereOutputParser pieces(format, options);
  Output got;
  std::size_t pos = 0;
  for (std::size_t k = 0; k < lengths; ++k) {
    const std::size_t end = char_boundary(text, pos + data[2 + k]);
    const std::string_view piece = std::string_view(text).substr(pos, end - pos);
    step(pieces, &piece, options, got);
    pos = end;
  }
  while (pos < text.size()) {
    const std::size_t end = rest_by_character ? char_boundary(text, pos + 1) : text.size();
    const std::string_view piece = std::string_view(text).substr(pos, end - pos);
    step(pieces, &piece, options, got);
    pos = end;
  }
  step(pieces, nullptr, options, got);
  check_finished(pieces);

  FUZZ_CHECK(got.reasoning == expected.reasoning);
  FUZZ_CHECK(got.content == expected.content);
  FUZZ_CHECK(got.tool_calls == expected.tool_calls);
  FUZZ_CHECK(got.citations == expected.citations);
  FUZZ_CHECK(pieces.saw_tool_calls() == whole.saw_tool_calls());
  check_citations(got);

  CitationRefs all_refs;
  for (const tide::ParsedCitation& citation : got.citations) {
    check_sources(citation.sources);
    all_refs.insert(all_refs.end(), citation.sources.begin(), citation.sources.end());
  }
  check_sources(all_refs);
  return 0;
}
