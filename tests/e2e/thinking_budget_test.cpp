// The thinking budget (GenerateOptions::thinking_budget) on the tiny fixture model, whose vocabulary has
// Cohere's <|START_THINKING|> (15) and <|END_THINKING|> (16): once a thinking block holds max_tokens tokens the
// closing token is generated next, whatever the model prefers and however it samples; outside a block, or
// before the budget is spent, the output is the model's own.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <nlohmann/json.hpp>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "runtime/engine.h"

namespace tide {
namespace {

constexpr int32_t kOpen = 15;
constexpr int32_t kClose = 16;

Engine make_engine(const std::string& speculative = "") {
  EngineOptions options;
  options.block_size = 4;
  options.kv_cache_memory = int64_t{64} << 20;
  if (!speculative.empty()) options.speculative = spec::SpeculativeConfig::parse(speculative);
  return Engine(test::fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), options);
}

GenerateOptions greedy(int64_t max_tokens) {
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.ignore_eos = true;
  // The model's own choice of either marker would move the block's bounds: keep them out of its reach.
  o.sampling.logit_bias = {{kOpen, -100.0f}, {kClose, -100.0f}};
  return o;
}

const std::vector<int32_t> kPrompt = {5, 8, 10, 300, 301, 302, 9, 8, 11};

TEST(ThinkingBudget, ClosesTheBlockTheTemplateOpenedAfterBudgetTokens) {
  Engine engine = make_engine();
  std::vector<int32_t> prompt = kPrompt;
  prompt.push_back(kOpen);
  const std::vector<int32_t> free_run = engine.generate(prompt, greedy(12)).ids;
  ASSERT_EQ(std::count(free_run.begin(), free_run.end(), kClose), 0);
  for (const int64_t budget : {0, 1, 3, 7}) {
    GenerateOptions o = greedy(12);
    o.thinking_budget = SpanBudget{kOpen, kClose, budget};
    const std::vector<int32_t> ids = engine.generate(prompt, o).ids;
    ASSERT_EQ(ids.size(), 12u) << budget;
    const auto b = static_cast<size_t>(budget);
    // The first `budget` tokens are the model's; then the closing token, forced against a -100 bias.
    EXPECT_TRUE(std::equal(ids.begin(), ids.begin() + budget, free_run.begin())) << budget;
    EXPECT_EQ(ids[b], kClose) << budget;
    EXPECT_EQ(std::count(ids.begin(), ids.end(), kClose), 1) << budget;
    // After the block, the model continues from a prompt that holds the closed block.
    std::vector<int32_t> continued = prompt;
    continued.insert(continued.end(), ids.begin(), ids.begin() + budget + 1);
    const std::vector<int32_t> rest = engine.generate(continued, greedy(12 - budget - 1)).ids;
    EXPECT_TRUE(std::equal(rest.begin(), rest.end(), ids.begin() + budget + 1)) << budget;
  }
}

TEST(ThinkingBudget, SampledRowsAndPenaltiesStillClose) {
  Engine engine = make_engine();
  std::vector<int32_t> prompt = kPrompt;
  prompt.push_back(kOpen);
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    GenerateOptions o = greedy(8);
    o.sampling.temperature = 1.5;
    o.sampling.top_p = 0.9;
    o.sampling.repetition_penalty = 1.3;
    o.sampling.frequency_penalty = 1.0;
    o.sampling.seed = seed;
    o.logprobs = 1;
    o.thinking_budget = SpanBudget{kOpen, kClose, 4};
    const GenerateResult r = engine.generate(prompt, o);
    ASSERT_EQ(r.ids.size(), 8u);
    EXPECT_EQ(r.ids[4], kClose) << seed;
    // The reported logprob is the model's, not the forced certainty.
    EXPECT_LT(r.logprobs[4].logprob, 0.0f) << seed;
  }
}

TEST(ThinkingBudget, GeneratedBlocksAreCountedAndOtherOutputIsUntouched) {
  Engine engine = make_engine();
  // Without an opening marker, the budget never forces anything.
  GenerateOptions o = greedy(10);
  const std::vector<int32_t> free_run = engine.generate(kPrompt, o).ids;
  o.thinking_budget = SpanBudget{kOpen, kClose, 0};
  EXPECT_EQ(engine.generate(kPrompt, o).ids, free_run);
  // A prompt whose block is already closed starts outside it.
  std::vector<int32_t> closed = kPrompt;
  closed.insert(closed.end(), {kOpen, 400, kClose});
  o.thinking_budget = SpanBudget{kOpen, kClose, 0};
  const std::vector<int32_t> after_closed = engine.generate(closed, o).ids;
  EXPECT_EQ(std::count(after_closed.begin(), after_closed.end(), kClose), 0);
  // A block the model opens itself (the opening marker made likely) is closed after the budget too.
  GenerateOptions opens = greedy(10);
  opens.sampling.logit_bias = {{kOpen, 100.0f}, {kClose, -100.0f}};
  opens.thinking_budget = SpanBudget{kOpen, kClose, 2};
  const std::vector<int32_t> ids = engine.generate(kPrompt, opens).ids;
  ASSERT_EQ(ids[0], kOpen);
  // An opening inside the block is one of its tokens; after the closing, the next opening starts a new block.
  const std::vector<int32_t> want = {kOpen, kOpen, kOpen, kClose, kOpen, kOpen, kOpen, kClose, kOpen, kOpen};
  EXPECT_EQ(ids, want);
}

// Speculation (a draft model: the fixture drafting for itself, so drafts run through the forced closing; prompt
// lookup) gives the ids of decoding without it: verify row i forces the closing token when the block, counted
// through d_1 .. d_i, holds the budget, so a draft that runs past the budget is refused there.
TEST(ThinkingBudget, SpeculationKeepsTheIds) {
  Engine plain = make_engine();
  const std::string draft = nlohmann::json{{"model", test::fixture("cohere2-tiny").string()},
                                           {"num_speculative_tokens", 4}}.dump();
  for (const std::string& config : {draft, std::string(R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1})")}) {
    SCOPED_TRACE(config);
    Engine engine = make_engine(config);
    std::vector<int32_t> prompt = kPrompt;
    prompt.push_back(kOpen);
    for (const int64_t budget : {0, 1, 3, 7}) {
      GenerateOptions o = greedy(16);
      o.thinking_budget = SpanBudget{kOpen, kClose, budget};
      const std::vector<int32_t> ids = engine.generate(prompt, o).ids;
      EXPECT_EQ(ids, plain.generate(prompt, o).ids) << budget;
      EXPECT_EQ(ids[static_cast<size_t>(budget)], kClose) << budget;
    }
    GenerateOptions opens = greedy(12);
    opens.sampling.logit_bias = {{kOpen, 100.0f}, {kClose, -100.0f}};
    opens.thinking_budget = SpanBudget{kOpen, kClose, 2};
    EXPECT_EQ(engine.generate(kPrompt, opens).ids, plain.generate(kPrompt, opens).ids);
    GenerateOptions sampled = greedy(10);
    sampled.sampling.temperature = 1.5;
    sampled.sampling.top_p = 0.9;
    sampled.sampling.seed = 3;
    sampled.thinking_budget = SpanBudget{kOpen, kClose, 4};
    const std::vector<int32_t> ids = engine.generate(prompt, sampled).ids;
    EXPECT_EQ(ids[4], kClose);
    if (config != draft) EXPECT_EQ(ids, plain.generate(prompt, sampled).ids);  // point-mass drafts: the same draws
    const EngineStats s = engine.stats();
    EXPECT_GT(s.spec_accepted_tokens, 0);
    EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens);  // drafts past a budget were refused
  }
}

TEST(ThinkingBudget, RefusesBadBudgets) {
  Engine engine = make_engine();
  GenerateOptions o = greedy(4);
  o.thinking_budget = SpanBudget{kOpen, kOpen, 3};
  EXPECT_THROW(engine.submit(kPrompt, o), Error);
  o.thinking_budget = SpanBudget{kOpen, engine.config().vocab_size, 3};
  EXPECT_THROW(engine.submit(kPrompt, o), Error);
  o.thinking_budget = SpanBudget{kOpen, kClose, -1};
  EXPECT_THROW(engine.submit(kPrompt, o), Error);
}

}  // namespace
}  // namespace tide
