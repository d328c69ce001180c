// Fuzzes the structured-output grammar engine (src/grammar) with what requests send it: JSON schemas, GBNF
// grammars, regular expressions and choices are untrusted. The input:
//   byte 0     the source: 0 JSON Schema, 1 GBNF, 2 regex, 3 choices (the lines of the rest)
//   byte 1     the walk's seed
//   the rest   the schema / grammar / pattern text
// Checked: compiling either refuses with GrammarError (or tide::Error, or a JSON parse error for a schema) or
// gives a grammar that validates; a compiled grammar, against a small vocabulary of one- to three-byte tokens
// (ASCII, JSON punctuation, UTF-8 lead and continuation bytes), gives at every state of a walk over allowed
// tokens a mask equal to trying every token on a copy of the matcher, the stop id exactly where the text may end,
// and each allowed token is accepted.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chat/json_exact.h"
#include "fuzz/fuzz_util.h"
#include "grammar/choice.h"
#include "grammar/compiled_grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace {

using namespace tide::grammar;

constexpr int32_t kStop = 0;
constexpr int kMaxSteps = 24;

// Token 0 is the stop; then single bytes, and a few multi-byte strings a JSON or UTF-8 walk needs.
std::shared_ptr<const TokenVocabulary> vocabulary() {
  static const std::shared_ptr<const TokenVocabulary> vocab = [] {
    std::vector<std::string> tokens = {""};
    for (int b = 1; b < 128; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    for (int b : {0x80, 0xA9, 0xBF, 0xC3, 0xE2, 0xF0}) tokens.push_back(std::string(1, static_cast<char>(b)));
    for (const char* s : {"\"", "\": ", ", ", "{\"", "\"}", "[]", "{}", "true", "null", "é", "€", "🎉", "\\u00",
                          "\\n", "12", "-1", "e+", "0."}) {
      tokens.push_back(s);
    }
    return std::make_shared<const TokenVocabulary>(std::move(tokens), std::vector<int32_t>{kStop});
  }();
  return vocab;
}

bool bit(const std::vector<uint32_t>& mask, int32_t id) { return (mask[static_cast<size_t>(id) / 32] >> (id % 32)) & 1u; }

Grammar compile_input(uint8_t source, std::string_view text) {
  switch (source % 4) {
    case 0: return compile_json_schema(tide::parse_json_exact(text, 64));
    case 1: return parse_gbnf(text);
    case 2: return compile_regex(text);
    default: {
      std::vector<std::string> choices;
      size_t start = 0;
      for (size_t i = 0; i <= text.size(); ++i) {
        if (i == text.size() || text[i] == '\n') {
          choices.emplace_back(text.substr(start, i - start));
          start = i + 1;
        }
      }
      return compile_choice(choices);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size > 4096) return 0;
  const std::string_view text = tide::fuzz::as_text(data + 2, size - 2);
  Grammar grammar;
  try {
    grammar = compile_input(data[0], text);
  } catch (const GrammarError&) {
    return 0;
  } catch (const tide::Error&) {
    return 0;
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  grammar.validate();  // a compiled grammar is valid: a throw here is a finding
  std::shared_ptr<const CompiledGrammar> compiled;
  try {
    compiled = compile(grammar, vocabulary());
  } catch (const GrammarError&) {
    return 0;
  }
  const TokenVocabulary& vocab = *vocabulary();
  GrammarMatcher matcher(compiled);
  uint32_t rng = data[1] * 2654435761u + 1;
  std::vector<uint32_t> mask(vocab.mask_words());
  try {
    for (int step = 0; step < kMaxSteps; ++step) {
      matcher.fill_mask(mask);
      FUZZ_CHECK(bit(mask, kStop) == matcher.can_end());
      std::vector<int32_t> allowed;
      for (int32_t id = 1; id < vocab.size(); ++id) {
        GrammarMatcher copy = matcher;
        const bool accepts = copy.accept_token(id);
        FUZZ_CHECK(accepts == bit(mask, id));
        if (accepts) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      rng = rng * 1664525u + 1013904223u;
      FUZZ_CHECK(matcher.accept_token(allowed[rng % allowed.size()]));
    }
  } catch (const GrammarError&) {
    // A grammar whose parse stacks explode is refused at run time: the documented outcome.
  }
  return 0;
}
