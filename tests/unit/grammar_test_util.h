// Helpers for the grammar engine's tests: vocabularies, matchers from GBNF, brute-force masks, and random
// walks through a grammar's sentences.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"

namespace tide::grammar::test {

// Ids 0-255 are the single bytes; id 256 is a stop id, id 257 a special token.
inline std::shared_ptr<const TokenVocabulary> byte_vocabulary() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  bytes.emplace_back("</s>");
  bytes.emplace_back("<special>");
  return std::make_shared<const TokenVocabulary>(std::move(bytes), std::vector<int32_t>{256}, std::vector<int32_t>{257});
}

inline GrammarMatcher matcher_for(const std::string& gbnf,
                                  std::shared_ptr<const TokenVocabulary> vocabulary = byte_vocabulary()) {
  return GrammarMatcher(compile(parse_gbnf(gbnf), std::move(vocabulary)));
}

// Whether `text` is a sentence of the grammar.
inline bool matches(const std::string& gbnf, std::string_view text) {
  GrammarMatcher m = matcher_for(gbnf);
  return m.accept_bytes(text) && m.can_end();
}

// Whether `text` is a prefix of a sentence.
inline bool prefix_ok(const std::string& gbnf, std::string_view text) { return matcher_for(gbnf).accept_bytes(text); }

inline bool bit(const std::vector<uint32_t>& mask, int32_t id) { return (mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u; }

// The mask a matcher should give, by trying every token on a copy.
inline std::vector<uint32_t> brute_force_mask(const GrammarMatcher& m) {
  const TokenVocabulary& v = m.vocabulary();
  std::vector<uint32_t> mask(v.mask_words(), 0);
  for (int32_t id = 0; id < v.size(); ++id) {
    GrammarMatcher copy = m;
    if (copy.accept_token(id)) mask[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
  }
  return mask;
}

// Walks the grammar by sampling among allowed tokens (stop ids only at the end or when nothing else is
// allowed), checking at every state that the mask equals the brute-force mask. Returns the text generated.
inline std::string walk_and_check(std::shared_ptr<const CompiledGrammar> grammar, uint32_t seed, int max_tokens,
                                  int* states_checked = nullptr) {
  GrammarMatcher m(grammar);
  const TokenVocabulary& v = grammar->vocabulary();
  std::mt19937 rng(seed);
  std::string text;
  std::vector<uint32_t> mask(v.mask_words());
  for (int step = 0; step < max_tokens; ++step) {
    m.fill_mask(mask);
    const std::vector<uint32_t> expected = brute_force_mask(m);
    for (int32_t id = 0; id < v.size(); ++id) {
      if (bit(mask, id) != bit(expected, id)) {
        ADD_FAILURE() << "seed " << seed << " after \"" << text << "\": token " << id << " (\"" << v.token_bytes(id)
                      << "\") mask " << bit(mask, id) << " brute force " << bit(expected, id);
        return text;
      }
    }
    if (states_checked) ++*states_checked;
    std::vector<int32_t> allowed, stops;
    for (int32_t id = 0; id < v.size(); ++id) {
      if (bit(mask, id)) (v.is_stop(id) ? stops : allowed).push_back(id);
    }
    if (allowed.empty() || (!stops.empty() && rng() % 8 == 0)) break;
    const int32_t id = allowed[rng() % allowed.size()];
    EXPECT_TRUE(m.accept_token(id));
    text += v.token_bytes(id);
  }
  return text;
}

}  // namespace tide::grammar::test
