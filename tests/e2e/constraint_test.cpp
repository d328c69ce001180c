// Output constraints through the engine (GenerateOptions::constraint), with hand-written constraints on the
// tiny fixture model: every token drawn is one the constraint allowed at that point, stop ids only where it may
// end, at temperature 1 and greedy, with n > 1 and penalties; a constraint that allows everything changes
// nothing; a constraint the output cannot satisfy (min_tokens banning the only allowed stop) ends the
// request with an error, not the engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "runtime/engine.h"

namespace tide {
namespace {

Engine make_engine() {
  EngineOptions options;
  options.block_size = 4;
  options.kv_cache_memory = int64_t{64} << 20;
  return Engine(test::fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), options);
}

void set(std::span<uint32_t> words, int32_t id) { words[static_cast<size_t>(id / 32)] |= 1u << (id % 32); }

// At each position: `allowed` tokens; from position `min_length` on also the stop ids; after `max_length`
// tokens only the stop ids. Records every token it accepted.
struct SetConstraint : TokenConstraint {
  std::set<int32_t> allowed;
  std::vector<int32_t> stops;
  size_t min_length = 0, max_length = 0;
  std::vector<int32_t>* seen = nullptr;
  size_t length = 0;

  void fill_mask(std::span<uint32_t> words) override {
    std::fill(words.begin(), words.end(), 0u);
    if (length < max_length) {
      for (int32_t id : allowed) set(words, id);
    }
    if (length >= min_length) {
      for (int32_t id : stops) set(words, id);
    }
  }
  bool accept(int32_t token) override {
    if (length >= max_length || !allowed.contains(token)) return false;
    ++length;
    if (seen) seen->push_back(token);
    return true;
  }
};

struct SetSpec : TokenConstraintSpec {
  std::set<int32_t> allowed;
  std::vector<int32_t> stops;
  size_t min_length = 0, max_length = 0;
  mutable std::vector<int32_t> seen;
  std::unique_ptr<TokenConstraint> start() const override {
    auto c = std::make_unique<SetConstraint>();
    c->allowed = allowed, c->stops = stops, c->min_length = min_length, c->max_length = max_length;
    c->seen = &seen;
    return c;
  }
};

// Everything allowed, the end anywhere.
struct AnySpec : TokenConstraintSpec {
  struct Any : TokenConstraint {
    void fill_mask(std::span<uint32_t> words) override { std::fill(words.begin(), words.end(), 0xFFFFFFFFu); }
    bool accept(int32_t) override { return true; }
  };
  std::unique_ptr<TokenConstraint> start() const override { return std::make_unique<Any>(); }
};

const std::vector<int32_t> kPrompt = {5, 8, 10, 300, 301, 302, 303, 9, 8, 11};

TEST(Constraint, SampledTokensStayInTheAllowedSetAndEndWhereAllowed) {
  Engine engine = make_engine();
  auto spec = std::make_shared<SetSpec>();
  for (int32_t id = 400; id < 420; ++id) spec->allowed.insert(id);
  spec->stops = engine.stop_token_ids();
  spec->min_length = 3;
  spec->max_length = 6;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    GenerateOptions o;
    o.max_tokens = 50;
    o.n = 2;
    o.sampling.temperature = 1.3;
    o.sampling.repetition_penalty = 1.2;
    o.sampling.seed = seed;
    o.constraint = spec;
    const GenerateResult r = engine.generate(kPrompt, o);
    for (const SampleResult& sample : r.samples) {
      ASSERT_FALSE(sample.ids.empty());
      // Stopped by a stop id after 3 to 6 allowed tokens.
      EXPECT_EQ(sample.finish_reason, "stop") << seed;
      const std::vector<int32_t> body(sample.ids.begin(), sample.ids.end() - 1);
      EXPECT_GE(body.size(), 3u);
      EXPECT_LE(body.size(), 6u);
      for (int32_t id : body) EXPECT_TRUE(spec->allowed.contains(id)) << id;
      EXPECT_NE(std::find(spec->stops.begin(), spec->stops.end(), sample.ids.back()), spec->stops.end());
    }
  }
}

TEST(Constraint, GreedyUnderAPermissiveConstraintEqualsUnconstrained) {
  Engine engine = make_engine();
  GenerateOptions o;
  o.max_tokens = 24;
  o.ignore_eos = true;
  const std::vector<int32_t> free_run = engine.generate(kPrompt, o).ids;
  o.constraint = std::make_shared<AnySpec>();
  EXPECT_EQ(engine.generate(kPrompt, o).ids, free_run);
  // Sampled too: the same seed draws the same tokens when the mask allows every one.
  o.sampling.temperature = 0.9;
  o.sampling.seed = 11;
  o.constraint = nullptr;
  const std::vector<int32_t> sampled = engine.generate(kPrompt, o).ids;
  o.constraint = std::make_shared<AnySpec>();
  EXPECT_EQ(engine.generate(kPrompt, o).ids, sampled);
}

TEST(Constraint, LengthMidStructureAndAnUnsatisfiableRequest) {
  Engine engine = make_engine();
  auto spec = std::make_shared<SetSpec>();
  spec->allowed = {600, 601};
  spec->stops = engine.stop_token_ids();
  spec->min_length = 10;
  spec->max_length = 10;
  GenerateOptions o;
  o.max_tokens = 4;
  o.constraint = spec;
  const GenerateResult cut = engine.generate(kPrompt, o);
  EXPECT_EQ(cut.finish_reason, "length");  // max_tokens inside the structure, as OpenAI reports it
  EXPECT_EQ(cut.ids.size(), 4u);
  // After its 10 tokens only a stop may follow, and min_tokens bans the stops: nothing is allowed, the drawn
  // token breaks the constraint, and the request (only it) ends with an error.
  o.max_tokens = 30;
  o.min_tokens = 20;
  const GenerateResult broken = engine.generate_batch(std::vector<BatchRequest>{{kPrompt, o}})[0];
  EXPECT_EQ(broken.finish_reason, "error");
  EXPECT_NE(broken.error.find("constraint"), std::string::npos) << broken.error;
  GenerateOptions plain;
  plain.max_tokens = 3;
  EXPECT_EQ(engine.generate(kPrompt, plain).ids.size(), 3u);  // the engine goes on
}

}  // namespace
}  // namespace tide
