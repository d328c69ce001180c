// Structured outputs end to end on the CPU: the tiny random-weight model sampled at temperature 1 (and with
// top-k / top-p / penalties on some requests) under JSON schemas (adversarial ones too), regexes, GBNF grammars
// and choices compiled by the server's ConstraintCache against the model's vocabulary. Only the constraint makes
// such a model's output parse, so every output that finished is checked: JSON parsed and validated against its
// schema by an independent validator, regexes with std::regex, grammars with a fresh matcher. Also: greedy under
// a grammar that allows any text equals unconstrained greedy, and max_tokens inside the structure is "length".
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>

#include "../test_util.h"
#include "../unit/grammar_schema_test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "grammar/matcher.h"
#include "runtime/engine.h"
#include "server/constraints.h"

namespace tide {
namespace {

using json = nlohmann::ordered_json;
using server::ConstraintCache;
using server::ConstraintFrame;
using server::StructuredOutput;

// `speculative`: a --speculative-config JSON, or none.
Engine make_engine(const std::string& speculative = {}) {
  EngineOptions options;
  options.block_size = 16;
  options.kv_cache_memory = int64_t{256} << 20;
  options.max_num_seqs = 64;
  if (!speculative.empty()) options.speculative = spec::SpeculativeConfig::parse(speculative);
  return Engine(test::fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), options);
}

const std::vector<int32_t> kPrompt = {5, 8, 10, 300, 301, 302, 9, 8, 11};

StructuredOutput schema_output(const char* schema) {
  StructuredOutput out;
  out.kind = StructuredOutput::Kind::kJsonSchema;
  out.schema = json::parse(schema);
  out.field = "response_format";
  return out;
}

// Schemas whose every value is bounded, so that a random model reaches the end; adversarial shapes included.
const char* const kSchemas[] = {
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 5}, "age": {"type": "integer",
        "minimum": 0, "maximum": 150}, "ok": {"type": "boolean"}}, "required": ["name", "age", "ok"],
        "additionalProperties": false})",
    R"({"enum": ["red", "green", "blue", "ünïcödé", "日本語", "emoji 🎉", "quote \" and \\ backslash", null, 42, true]})",
    R"({"type": "array", "items": {"type": "integer", "minimum": -20, "maximum": 20}, "minItems": 1, "maxItems": 4})",
    R"({"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "object", "properties":
        {"c": {"type": "object", "properties": {"d": {"type": "array", "items": {"const": "deep"}, "maxItems": 2}},
        "required": ["d"], "additionalProperties": false}}, "required": ["c"], "additionalProperties": false}},
        "required": ["b"], "additionalProperties": false}}, "required": ["a"], "additionalProperties": false})",
    R"({"type": "object", "properties": {"键": {"type": "string", "maxLength": 3}, "ключ\n\t": {"enum": [1, 2]},
        "x\"y": {"type": "null"}}, "required": ["键", "ключ\n\t", "x\"y"], "additionalProperties": false})",
    R"({"anyOf": [{"type": "integer", "minimum": 100, "maximum": 999}, {"type": "string", "maxLength": 2},
        {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}]})",
    R"({"type": "number", "minimum": -1.5, "maximum": 2.25})",
    R"({"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"})",
    R"({"type": "string", "format": "date"})",
    R"({"type": "object", "properties": {"id": {"type": "string", "format": "uuid"}, "when": {"type": "string",
        "format": "date-time"}}, "required": ["id", "when"], "additionalProperties": false})",
    R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
        "next": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/node"}]}}, "required": ["v", "next"],
        "additionalProperties": false}}, "$ref": "#/$defs/node"})",
    R"({"type": "array", "prefixItems": [{"type": "string", "maxLength": 2}, {"enum": ["x", "y"]}], "items": false})",
};

struct Case {
  StructuredOutput output;
  std::function<std::string(const std::string&)> check;  // "" when valid, else why not
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* text : kSchemas) {
    const json schema = json::parse(text);
    out.push_back({schema_output(text), [schema](const std::string& s) {
                     const json value = json::parse(s, nullptr, /*allow_exceptions=*/false);
                     if (value.is_discarded()) return std::string("not JSON");
                     return test::SchemaValidator(schema).check(value);
                   }});
  }
  for (const char* re : {"[0-9]{3}-[a-z]{2,4}", "(yes|no|maybe)!?", "[A-Z][a-z]{0,6}( [A-Z][a-z]{0,6}){0,2}\\."}) {
    StructuredOutput o;
    o.kind = StructuredOutput::Kind::kRegex;
    o.text = re;
    o.field = "guided_regex";
    const std::regex pattern(re);
    out.push_back({o, [pattern](const std::string& s) { return std::regex_match(s, pattern) ? "" : "no match"; }});
  }
  StructuredOutput choice;
  choice.kind = StructuredOutput::Kind::kChoice;
  choice.choices = {"alpha", "beta", "gamma delta", "ε"};
  choice.field = "guided_choice";
  out.push_back({choice, [c = choice.choices](const std::string& s) {
                   return std::find(c.begin(), c.end(), s) != c.end() ? "" : "not a choice";
                 }});
  return out;
}

// Every case of cases() with `seeds` seeds each (request i is case i / seeds): temperature 1 (0 when `greedy`),
// with top-k, top-p or penalties on some.
std::vector<BatchRequest> batch_of(const std::vector<Case>& all, ConstraintCache& cache, int seeds, bool greedy = false) {
  std::vector<BatchRequest> batch;
  for (size_t c = 0; c < all.size(); ++c) {
    const auto spec = cache.structured(all[c].output, ConstraintFrame::kPlain);
    for (int seed = 0; seed < seeds; ++seed) {
      GenerateOptions o;
      o.max_tokens = 160;
      o.constraint = spec;
      o.sampling.temperature = greedy ? 0.0 : 1.0;
      o.sampling.seed = static_cast<uint64_t>(seed * 7919 + c);
      if (seed % 4 == 1) o.sampling.top_k = 20;
      if (seed % 4 == 2) o.sampling.top_p = 0.8;
      if (seed % 4 == 3) o.sampling.repetition_penalty = 1.3, o.sampling.frequency_penalty = 0.5;
      batch.push_back({kPrompt, o});
    }
  }
  return batch;
}

// Every output of `results` (of batch_of(all, ·, seeds)) that stopped is valid for its case, none failed, and
// nearly all stopped (bounded constraints).
void expect_valid(const Engine& engine, const std::vector<Case>& all, int seeds, const std::vector<GenerateResult>& results) {
  int stopped = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    const Case& c = all[i / static_cast<size_t>(seeds)];
    const GenerateResult& r = results[i];
    ASSERT_NE(r.finish_reason, "error") << r.error;
    std::vector<int32_t> ids = r.ids;
    if (r.finish_reason == "stop") {
      ids.pop_back();  // the stop id
      ++stopped;
    }
    const std::string text = engine.tokenizer().decode(ids, /*skip_special_tokens=*/false);
    if (r.finish_reason == "stop") {
      EXPECT_EQ(c.check(text), "") << "case " << i / static_cast<size_t>(seeds) << ": " << text;
    } else {
      EXPECT_EQ(r.finish_reason, "length");
    }
  }
  EXPECT_GE(stopped, static_cast<int>(results.size() * 9 / 10)) << stopped << " of " << results.size();
}

TEST(StructuredOutput, EverySampledOutputIsValid) {
  Engine engine = make_engine();
  ConstraintCache cache(engine.tokenizer(), engine.stop_token_ids());
  const std::vector<Case> all = cases();
  constexpr int kSeeds = 16;
  expect_valid(engine, all, kSeeds, engine.generate_batch(batch_of(all, cache, kSeeds)));
}

// Speculative decoding under constraints: a draft is cut where the constraint refuses it, and a verify step's
// rows after the first take their masks from a copy of the state advanced through the drafts before them. So
// prompt lookup gives exactly the ids of decoding without it (sampled, every kind of constraint), with drafts
// accepted; a draft model (the model drafting for itself) keeps greedy ids, and its sampled outputs (drafts
// checked against the draft's distribution, which knows no constraint) stay valid.
TEST(StructuredOutput, SpeculationKeepsTheIdsAndTheStructure) {
  Engine plain = make_engine();
  ConstraintCache cache(plain.tokenizer(), plain.stop_token_ids());
  const std::vector<Case> all = cases();
  constexpr int kSeeds = 4;
  const std::vector<BatchRequest> sampled = batch_of(all, cache, kSeeds), greedy = batch_of(all, cache, kSeeds, true);
  const std::vector<GenerateResult> want = plain.generate_batch(sampled), want_greedy = plain.generate_batch(greedy);

  Engine ngram = make_engine(R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1})");
  const std::vector<GenerateResult> got = ngram.generate_batch(sampled);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].ids, want[i].ids) << "request " << i;
  const EngineStats s = ngram.stats();
  std::printf("[ spec     ] prompt lookup under constraints: %ld of %ld drafts accepted\n",
              static_cast<long>(s.spec_accepted_tokens), static_cast<long>(s.spec_draft_tokens));
  EXPECT_GT(s.spec_accepted_tokens, 0);

  Engine draft = make_engine(R"({"model": ")" + test::fixture("cohere2-tiny").string() + R"(", "num_speculative_tokens": 3})");
  const std::vector<GenerateResult> got_greedy = draft.generate_batch(greedy);
  for (size_t i = 0; i < want_greedy.size(); ++i) EXPECT_EQ(got_greedy[i].ids, want_greedy[i].ids) << "request " << i;
  EXPECT_GT(draft.stats().spec_accepted_tokens, 0);
  const int64_t before = draft.stats().spec_accepted_tokens;
  expect_valid(draft, all, kSeeds, draft.generate_batch(sampled));
  EXPECT_GT(draft.stats().spec_accepted_tokens, before);
}

TEST(StructuredOutput, GreedyUnderAnyTextEqualsUnconstrained) {
  Engine engine = make_engine();
  ConstraintCache cache(engine.tokenizer(), engine.stop_token_ids());
  StructuredOutput any;
  any.kind = StructuredOutput::Kind::kGrammar;
  any.text = "root ::= [^\\x00]*";
  any.field = "guided_grammar";
  const auto spec = cache.structured(any, ConstraintFrame::kPlain);
  int compared = 0;
  for (int32_t start = 300; start < 400; start += 2) {
    std::vector<int32_t> prompt = kPrompt;
    prompt.push_back(start);
    GenerateOptions o;
    o.max_tokens = 24;
    const GenerateResult free_run = engine.generate(prompt, o);
    // A grammar's text is valid UTF-8 without special tokens (other than the stop): a random model's output that
    // breaks UTF-8 (its decoding shows U+FFFD) or holds a special token is not comparable.
    const bool special = std::any_of(free_run.ids.begin(), free_run.ids.end(), [&](int32_t id) {
      return engine.tokenizer().is_special(id) &&
             std::find(engine.stop_token_ids().begin(), engine.stop_token_ids().end(), id) == engine.stop_token_ids().end();
    });
    if (special || engine.tokenizer().decode(free_run.ids).find("\xEF\xBF\xBD") != std::string::npos) continue;
    o.constraint = spec;
    EXPECT_EQ(engine.generate(prompt, o).ids, free_run.ids) << "prompt ending " << start;
    ++compared;
  }
  EXPECT_GE(compared, 5);
}

TEST(StructuredOutput, LengthInsideTheStructureAndASingleChoice) {
  Engine engine = make_engine();
  ConstraintCache cache(engine.tokenizer(), engine.stop_token_ids());
  GenerateOptions o;
  o.max_tokens = 3;
  o.constraint = cache.structured(schema_output(R"({"type": "array", "items": {"type": "integer"}, "minItems": 50})"),
                                  ConstraintFrame::kPlain);
  const GenerateResult cut = engine.generate(kPrompt, o);
  EXPECT_EQ(cut.finish_reason, "length");
  EXPECT_EQ(cut.text.front(), '[');
  StructuredOutput one;
  one.kind = StructuredOutput::Kind::kChoice;
  one.choices = {"the only answer"};
  one.field = "guided_choice";
  o.max_tokens = 50;
  o.sampling.temperature = 1.0;
  o.sampling.seed = 3;
  o.constraint = cache.structured(one, ConstraintFrame::kPlain);
  const GenerateResult r = engine.generate(kPrompt, o);
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.text, "the only answer");
}

}  // namespace
}  // namespace tide
