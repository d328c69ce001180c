// Cohere citations: <co>...</co: ...> tags taken out of the response and thinking text (with code-point offsets),
// malformed tags left as text, the tag grammar, and citation_sources against a conversation.
#include <gtest/gtest.h>

#include "chat/cohere_output.h"
#include "chat/cohere_output_detail.h"
#include "cohere_output_test_util.h"

namespace tide {
namespace {

using cohere::Match;

CohereParseOptions with_citations() {
  CohereParseOptions options;
  options.citations = true;
  return options;
}

test::CohereResult parse_cited(std::string_view text) {
  return test::parse_cohere(text, CohereFormat::kActions, with_citations());
}

// The code points [start, end) of `text`.
std::string code_points(std::string_view text, int64_t start, int64_t end) {
  std::string out;
  int64_t index = -1;
  for (const char c : text) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++index;
    if (index >= start && index < end) out.push_back(c);
  }
  return out;
}

ParsedCitation citation(int64_t start, int64_t end, std::string text, CitationRefs sources, bool in_reasoning) {
  return {start, end, std::move(text), std::move(sources), in_reasoning};
}

TEST(CohereCitations, InResponseWithCodePointOffsets) {
  const auto result = parse_cited(
      "<|START_RESPONSE|>Ünïcödé first: <co>Paris is sunny</co: 0:[1,2],1:[0]> and <co>18°C</co: 1:[0]>."
      "<|END_RESPONSE|><|END_OF_TURN_TOKEN|>");
  EXPECT_EQ(result.content, "Ünïcödé first: Paris is sunny and 18°C.");
  EXPECT_EQ(result.citations,
            (std::vector<ParsedCitation>{citation(15, 29, "Paris is sunny", {{"0", {1, 2}}, {"1", {0}}}, false),
                                         citation(34, 38, "18°C", {{"1", {0}}}, false)}));
  for (const auto& cited : result.citations) {
    EXPECT_EQ(code_points(result.content, cited.start, cited.end), cited.text);
  }
}

TEST(CohereCitations, InThinkingAndOutsideBlocks) {
  const auto result = parse_cited(
      "Intro ✓ <|START_THINKING|>Dès que <co: 0:[0]>it rains</co: 0:[0]>…<|END_THINKING|>"
      "<|START_RESPONSE|>Ça: <co>wet</co: 0:[0], 2:[3, 4]><|END_RESPONSE|>");
  EXPECT_EQ(result.reasoning, "Dès que it rains…");
  EXPECT_EQ(result.content, "Intro ✓ Ça: wet");
  EXPECT_EQ(result.citations,
            (std::vector<ParsedCitation>{citation(8, 16, "it rains", {{"0", {0}}}, true),
                                         citation(12, 15, "wet", {{"0", {0}}, {"2", {3, 4}}}, false)}));
}

TEST(CohereCitations, OpeningTagSourcesAndEmptyLists) {
  // The older form names the sources in the opening tag (and repeats them); "</co>" then closes it too.
  auto result = parse_cited("<co: 0:[2]>a</co: 0:[2]> <co: 1:[0]>b</co> <co>c</co: 3:[]>");
  EXPECT_EQ(result.content, "a b c");
  EXPECT_EQ(result.citations, (std::vector<ParsedCitation>{citation(0, 1, "a", {{"0", {2}}}, false),
                                                           citation(2, 3, "b", {{"1", {0}}}, false),
                                                           citation(4, 5, "c", {{"3", {}}}, false)}));
}

TEST(CohereCitations, MalformedTagsStayText) {
  const std::vector<std::string> texts = {
      "a </co: x> b",
      "<co>unclosed at the end",
      "<co: bad>x</co: bad>",
      "<co>no sources</co>",
      "stray </co: 0:[1]> closing",
      "<co: 0:[1x]>y",
      "<cop>z</co: 0:[1]>",
      "<co: 0:[1], >w</co: 0:[1]>",
  };
  for (const auto& text : texts) {
    const auto result = parse_cited(text);
    EXPECT_EQ(result.content, text);
    EXPECT_TRUE(result.citations.empty()) << text;
  }
}

TEST(CohereCitations, SpanEndsAtAMarker) {
  const auto result = parse_cited("<|START_RESPONSE|>é <co>abc<|END_RESPONSE|> <co>d</co: 0:[0]>");
  EXPECT_EQ(result.content, "é <co>abc d");
  EXPECT_EQ(result.citations, (std::vector<ParsedCitation>{citation(10, 11, "d", {{"0", {0}}}, false)}));
}

TEST(CohereCitations, SecondOpeningTagRestartsTheSpan) {
  const auto result = parse_cited("<co>a <co>b</co: 0:[0]>");
  EXPECT_EQ(result.content, "<co>a b");
  EXPECT_EQ(result.citations, (std::vector<ParsedCitation>{citation(6, 7, "b", {{"0", {0}}}, false)}));
}

TEST(CohereCitations, OffIsText) {
  const std::string text = "<|START_RESPONSE|><co>x</co: 0:[1]><|END_RESPONSE|>";
  const auto result = test::parse_cohere(text);
  EXPECT_EQ(result.content, "<co>x</co: 0:[1]>");
  EXPECT_TRUE(result.citations.empty());
}

TEST(CohereCitations, ReasoningOffDropsThinkingCitations) {
  CohereParseOptions options = with_citations();
  options.reasoning = false;
  const auto result = test::parse_cohere("<|START_THINKING|><co>x</co: 0:[1]><|END_THINKING|>y<co>z</co: 0:[2]>",
                                         CohereFormat::kActions, options);
  EXPECT_EQ(result.reasoning, "");
  EXPECT_EQ(result.content, "yz");
  EXPECT_EQ(result.citations, (std::vector<ParsedCitation>{citation(1, 2, "z", {{"0", {2}}}, false)}));
}

TEST(CohereCitations, MalformedActionTextIsNotParsedForCitations) {
  const std::string block = "<|START_ACTION|>[<co>x</co: 0:[1]>]<|END_ACTION|>";
  const auto result = parse_cited("ä " + block + "<co>y</co: 0:[1]>");
  EXPECT_EQ(result.content, "ä " + block + "y");
  const int64_t at = static_cast<int64_t>(2 + block.size());  // the block is ASCII
  EXPECT_EQ(result.citations, (std::vector<ParsedCitation>{citation(at, at + 1, "y", {{"0", {1}}}, false)}));
}

TEST(CohereCitations, LegacyFormatToo) {
  const auto result = test::parse_legacy("Grounded: <co: 0:[0]>fact</co: 0:[0]>.", with_citations());
  EXPECT_EQ(result.content, "Grounded: fact.");
  EXPECT_EQ(result.citations, (std::vector<ParsedCitation>{citation(10, 14, "fact", {{"0", {0}}}, false)}));
}

TEST(CohereCitations, HoldsBackOnlyWhatMayStillBeATag) {
  CohereOutputParser parser(CohereFormat::kActions, with_citations());
  EXPECT_EQ(parser.feed("abc<co").content, "abc");
  EXPECT_EQ(parser.feed(": 0:[").content, "");
  EXPECT_EQ(parser.feed("1]>x").content, "");  // the span waits for its closing tag
  auto delta = parser.feed("</co: 0:[1]> y <cx");
  EXPECT_EQ(delta.content, "x y <cx");
  ASSERT_EQ(delta.citations.size(), 1u);
  EXPECT_EQ(delta.citations[0].start, 3);
  EXPECT_EQ(parser.feed(" <").content, " ");
  EXPECT_EQ(parser.finish().content, "<");
}

TEST(CohereCitations, OversizedSpanIsReleased) {
  CohereParseOptions options = with_citations();
  options.max_held_bytes = 8;
  const std::string text = "<co>0123456789abc</co: 0:[1]> <co>short</co: 0:[2]>";
  const auto result = test::parse_cohere(text, CohereFormat::kActions, options);
  EXPECT_EQ(result.content, "<co>0123456789abc</co: 0:[1]> short");
  EXPECT_EQ(result.citations, (std::vector<ParsedCitation>{citation(30, 35, "short", {{"0", {2}}}, false)}));
}

TEST(CohereCitations, TagGrammar) {
  auto tag = cohere::match_citation_tag("</co: 0:[1, 2], 1 : [ 0 ]>rest", /*closing=*/true);
  EXPECT_EQ(tag.match, Match::kDone);
  EXPECT_EQ(tag.length, 26u);
  EXPECT_EQ(tag.sources, (CitationRefs{{"0", {1, 2}}, {"1", {0}}}));
  tag = cohere::match_citation_tag("<co>", false);
  EXPECT_EQ(tag.match, Match::kDone);
  EXPECT_FALSE(tag.has_sources);
  for (const char* partial :
       {"<", "<c", "<co", "<co:", "<co: 0", "<co: 0:[", "<co: 0:[12", "<co: 0:[1]", "<co: 0:[1],"}) {
    EXPECT_EQ(cohere::match_citation_tag(partial, false).match, Match::kPartial) << partial;
  }
  for (const char* no : {"<cop", "<co:>", "<co: 0:[a]>", "<co: 0[1]>", "<co: 0:[1]x", "</co: 0:[1]>", "<co: :[1]>"}) {
    EXPECT_EQ(cohere::match_citation_tag(no, false).match, Match::kNo) << no;
  }
  EXPECT_EQ(cohere::match_citation_tag("<co: 0:[1234567890123456]>", false).match, Match::kNo);  // 16 digits
  EXPECT_EQ(cohere::match_citation_tag("<co: 0:[1" + std::string(2000, ' '), false).match, Match::kNo);  // too long
}

// citation_sources: a conversation with two rounds of tool calls (string, JSON-object string and list results) and
// a call that has no result.
nlohmann::ordered_json conversation() {
  return nlohmann::ordered_json::parse(R"([
    {"role": "user", "content": "Weather and news?"},
    {"role": "assistant", "tool_calls": [
      {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": "{}"}},
      {"id": "call_b", "type": "function", "function": {"name": "news", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_a", "content": "18°C, sunny"},
    {"role": "tool", "tool_call_id": "call_b", "content": "{\"headline\": \"Nothing happened\", \"n\": 2}"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_c", "type": "function", "function": {"name": "more", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "call_c", "content": [{"type": "text", "text": "first"}, "second"]},
    {"role": "assistant", "tool_calls": [{"id": "call_d", "type": "function", "function": {"name": "x"}}]}
  ])");
}

nlohmann::ordered_json tool_source(const std::string& id, nlohmann::ordered_json output) {
  return {{"type", "tool"}, {"id", id}, {"tool_output", std::move(output)}};
}

TEST(CohereSources, WithDocuments) {
  const auto documents = nlohmann::ordered_json::parse(R"([{"id": "wiki-7", "title": "Paris"}, "plain text"])");
  const CitationRefs refs = {{"0", {1, 0, 5, -1}}, {"1", {0, 1}}, {"2", {0, 1}}, {"3", {1, 0, 2}},
                             {"4", {0}},           {"9", {0}},    {"x", {0}},    {"1", {0}}};
  const auto sources = citation_sources(conversation(), documents, refs);
  const nlohmann::ordered_json expected = {
      {{"type", "document"}, {"id", "doc:1"}, {"document", {{"text", "plain text"}}}},
      {{"type", "document"}, {"id", "wiki-7"}, {"document", {{"id", "wiki-7"}, {"title", "Paris"}}}},
      tool_source("call_a:0", {{"text", "18°C, sunny"}}),
      tool_source("call_b:0", {{"headline", "Nothing happened"}, {"n", 2}}),
      tool_source("call_c:1", {{"text", "second"}}),
      tool_source("call_c:0", {{"type", "text"}, {"text", "first"}}),
  };
  EXPECT_EQ(sources, expected) << sources.dump(2);
}

TEST(CohereSources, WithoutDocuments) {
  const CitationRefs refs = {{"0", {0}}, {"1", {0}}, {"3", {0}}};
  const nlohmann::ordered_json expected = {tool_source("call_a:0", {{"text", "18°C, sunny"}}),
                                           tool_source("call_b:0", {{"headline", "Nothing happened"}, {"n", 2}})};
  EXPECT_EQ(citation_sources(conversation(), nullptr, refs), expected);
  EXPECT_EQ(citation_sources(conversation(), nlohmann::ordered_json::array(), refs), expected);  // empty: none
  EXPECT_EQ(citation_sources(nullptr, nullptr, refs), nlohmann::ordered_json::array());
}

}  // namespace
}  // namespace tide
