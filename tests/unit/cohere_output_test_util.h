// Helpers for the CohereOutputParser tests: parse a text whole, and check that every way of splitting it into
// pieces (every split in two, one character at a time, random splits) gives the same result.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "chat/cohere_output.h"

namespace tide::test {

// Everything a parser returned, its deltas concatenated.
struct CohereResult {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  std::vector<ParsedCitation> citations;

  void add(CohereDelta delta) {
    reasoning += delta.reasoning;
    content += delta.content;
    tool_calls.insert(tool_calls.end(), delta.tool_calls.begin(), delta.tool_calls.end());
    citations.insert(citations.end(), delta.citations.begin(), delta.citations.end());
  }
  bool operator==(const CohereResult&) const = default;
};

inline void PrintTo(const CohereResult& result, std::ostream* os) {
  *os << "{reasoning: \"" << result.reasoning << "\", content: \"" << result.content << "\", tool_calls: [";
  for (const auto& call : result.tool_calls) {
    *os << "{id: \"" << call.model_call_id << "\", name: \"" << call.name << "\", arguments: " << call.arguments
        << "} ";
  }
  *os << "], citations: [";
  for (const auto& citation : result.citations) {
    *os << "{" << citation.start << ".." << citation.end << " \"" << citation.text << "\""
        << (citation.in_reasoning ? " reasoning" : "") << " sources:";
    for (const auto& [id, indices] : citation.sources) {
      *os << " " << id << ":[";
      for (const auto index : indices) *os << index << ",";
      *os << "]";
    }
    *os << "} ";
  }
  *os << "]}";
}

// Whether `text` is whole UTF-8 characters (no cut lead or continuation bytes at its ends).
inline bool whole_characters(std::string_view text) {
  if (text.empty()) return true;
  if ((static_cast<unsigned char>(text.front()) & 0xC0) == 0x80) return false;
  std::size_t lead = text.size() - 1;
  while (lead > 0 && (static_cast<unsigned char>(text[lead]) & 0xC0) == 0x80) --lead;
  const unsigned char c = static_cast<unsigned char>(text[lead]);
  const std::size_t length = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
  return text.size() - lead == length;
}

inline CohereResult parse_pieces(const std::vector<std::string_view>& pieces, CohereFormat format,
                                 const CohereParseOptions& options) {
  CohereOutputParser parser(format, options);
  CohereResult result;
  const auto add = [&](CohereDelta delta) {
    EXPECT_TRUE(whole_characters(delta.content)) << delta.content;
    EXPECT_TRUE(whole_characters(delta.reasoning)) << delta.reasoning;
    result.add(std::move(delta));
  };
  for (const auto piece : pieces) add(parser.feed(piece));
  add(parser.finish());
  return result;
}

// The offsets at which `text` may be split: between UTF-8 characters (pieces are whole characters).
inline std::vector<std::size_t> char_boundaries(std::string_view text) {
  std::vector<std::size_t> cuts;
  for (std::size_t i = 1; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) cuts.push_back(i);
  }
  return cuts;
}

inline std::vector<std::string_view> split_at(std::string_view text, const std::vector<std::size_t>& cuts) {
  std::vector<std::string_view> pieces;
  std::size_t start = 0;
  for (const std::size_t cut : cuts) {
    pieces.push_back(text.substr(start, cut - start));
    start = cut;
  }
  pieces.push_back(text.substr(start));
  return pieces;
}

// Parses `text` whole and checks that every split of it gives the same result; returns the whole text's result.
inline CohereResult parse_cohere(std::string_view text, CohereFormat format = CohereFormat::kActions,
                                 const CohereParseOptions& options = {}) {
  const CohereResult whole = parse_pieces({text}, format, options);
  const auto cuts = char_boundaries(text);
  for (const std::size_t cut : cuts) {
    const CohereResult split = parse_pieces(split_at(text, {cut}), format, options);
    EXPECT_EQ(split, whole) << "split at byte " << cut << " of: " << text;
    if (split != whole) break;  // one report per text is enough
  }
  EXPECT_EQ(parse_pieces(split_at(text, cuts), format, options), whole) << "one character at a time: " << text;
  std::mt19937 random(static_cast<unsigned>(text.size()));
  for (int round = 0; round < 40 && !cuts.empty(); ++round) {
    std::vector<std::size_t> some;
    for (const std::size_t cut : cuts) {
      if (random() % 4 == 0) some.push_back(cut);
    }
    EXPECT_EQ(parse_pieces(split_at(text, some), format, options), whole) << "random split " << round << ": " << text;
  }
  return whole;
}

inline CohereResult parse_legacy(std::string_view text, const CohereParseOptions& options = {}) {
  return parse_cohere(text, CohereFormat::kLegacyActions, options);
}

}  // namespace tide::test
