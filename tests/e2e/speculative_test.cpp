// Speculative decoding (prompt lookup) through the engine on the fixture models and the demo model: every
// request generates the same ids (and logprobs) with speculation as without it, greedy and sampled
// (temperature, top-k / top-p, penalties, a seed), for draft lengths 1 .. 6, block sizes below, at and beyond
// the window, with prefix reuse and with preemption; drafts are accepted and rejected along the way (counted),
// and no KV block stays in use.
#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>
#include <random>

#include "../test_util.h"
#include "speculative_test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace tide {
namespace {

using test::fixture;

EngineOptions options_with(int64_t block_size, int64_t kv_cache_memory, int k) {
  EngineOptions e;
  e.block_size = block_size;
  e.kv_cache_memory = kv_cache_memory;
  e.max_prefill_chunk = 64;
  if (k > 0) {
    e.speculative = spec::SpeculativeConfig::parse(
        R"({"method": "ngram", "num_speculative_tokens": )" + std::to_string(k) + R"(, "prompt_lookup_min": 1})");
  }
  return e;
}

std::vector<GenerateResult> run(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                const GenerateOptions& options) {
  std::vector<BatchRequest> batch;
  for (const auto& p : prompts) batch.push_back(BatchRequest{p, options});
  return engine.generate_batch(batch);
}

class SpeculativeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SpeculativeTest, GreedyIdsAreTheSameAsWithout) {
  const std::string model = GetParam();
  const ModelConfig config = ModelConfig::from_dir(fixture(model));
  const int64_t window = config.layers.front().window;
  const auto prompts = test::quoting_prompts(config.vocab_size, 7);
  GenerateOptions options;
  options.max_tokens = 40;
  options.ignore_eos = true;
  options.logprobs = 2;
  Engine plain(fixture(model), std::make_unique<CpuBackend>(), options_with(16, int64_t{64} << 20, 0));
  const std::vector<GenerateResult> want = run(plain, prompts, options);
  // Each draft length once, the block sizes in turn (below, at and beyond the window).
  const int64_t blocks[] = {3, 16, window + 8};
  for (int k = 1; k <= 6; ++k) {
    const int64_t block = blocks[(k - 1) % 3];
    Engine engine(fixture(model), std::make_unique<CpuBackend>(), options_with(block, int64_t{64} << 20, k));
    const std::vector<GenerateResult> got = run(engine, prompts, options);
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(got[i].ids, want[i].ids) << "k " << k << " block " << block << " prompt " << i;
      ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size());
      for (size_t j = 0; j < want[i].logprobs.size(); ++j) {
        EXPECT_EQ(got[i].logprobs[j].id, want[i].logprobs[j].id);
        EXPECT_NEAR(got[i].logprobs[j].logprob, want[i].logprobs[j].logprob, 1e-4) << "k " << k << " token " << j;
      }
    }
    const EngineStats s = engine.stats();
    EXPECT_GT(s.spec_accepted_tokens, 0) << "k " << k << " block " << block;
    EXPECT_GT(s.spec_verifies, 0);
    EXPECT_LE(s.spec_accepted_tokens, s.spec_draft_tokens);
    ASSERT_EQ(s.spec_draft_tokens_per_position.size(), static_cast<size_t>(k));
    EXPECT_EQ(s.spec_draft_tokens_per_position[0], s.spec_verifies);
    EXPECT_EQ(std::accumulate(s.spec_draft_tokens_per_position.begin(), s.spec_draft_tokens_per_position.end(), int64_t{0}),
              s.spec_draft_tokens);
    EXPECT_EQ(std::accumulate(s.spec_accepted_tokens_per_position.begin(), s.spec_accepted_tokens_per_position.end(),
                              int64_t{0}),
              s.spec_accepted_tokens);
    EXPECT_EQ(s.generation_tokens, static_cast<int64_t>(prompts.size()) * options.max_tokens);
    EXPECT_EQ(engine.kv_report().arena.in_use_blocks, 0);
  }
}

// The draw of each token keeps its seed and counter, so sampled outputs match too: temperature, top-k, top-p,
// repetition / presence / frequency penalties (their history includes the drafts before each row). On the
// bundled demo model (trained on text: its distributions are peaked, and it continues a passage it has seen
// in its prompt), prompts that quote a passage, so that drafts are accepted and rows after an accepted draft
// decide tokens.
TEST(SpeculativeDemo, SampledIdsAreTheSameAsWithout) {
  const std::filesystem::path dir = test::bundled_model("tide-demo");
  const Tokenizer tokenizer = Tokenizer::from_dir(dir);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t cut : {40, 80, 120}) prompts.push_back(tokenizer.encode(test::quoted_passage(cut)));
  GenerateOptions options;
  options.max_tokens = 48;
  options.ignore_eos = true;
  options.n = 2;
  options.sampling.temperature = 0.5;
  options.sampling.top_k = 40;
  options.sampling.top_p = 0.95;
  options.sampling.repetition_penalty = 1.05;
  options.sampling.presence_penalty = 0.4;
  options.sampling.frequency_penalty = 0.4;
  options.sampling.seed = 1234;
  options.logprobs = 1;
  Engine plain(dir, std::make_unique<CpuBackend>(), options_with(16, int64_t{64} << 20, 0));
  const std::vector<GenerateResult> want = run(plain, prompts, options);
  Engine engine(dir, std::make_unique<CpuBackend>(), options_with(16, int64_t{64} << 20, 4));
  const std::vector<GenerateResult> got = run(engine, prompts, options);
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (size_t n = 0; n < 2; ++n) {
      EXPECT_EQ(got[i].samples[n].ids, want[i].samples[n].ids) << "prompt " << i << " sample " << n;
      ASSERT_EQ(got[i].samples[n].logprobs.size(), want[i].samples[n].logprobs.size());
      for (size_t j = 0; j < want[i].samples[n].logprobs.size(); ++j) {
        EXPECT_NEAR(got[i].samples[n].logprobs[j].logprob, want[i].samples[n].logprobs[j].logprob, 1e-4);
      }
    }
  }
  const EngineStats s = engine.stats();
  std::printf("[ spec     ] demo model, sampled: %ld of %ld drafted tokens accepted in %ld verifications\n",
              static_cast<long>(s.spec_accepted_tokens), static_cast<long>(s.spec_draft_tokens),
              static_cast<long>(s.spec_verifies));
  EXPECT_GE(s.spec_accepted_tokens, 20);
  EXPECT_EQ(engine.kv_report().arena.in_use_blocks, 0);
}

// An arena too small for every request at once: requests are preempted and recomputed between verify steps.
// max_tokens cuts a run of accepted drafts where it would have cut the tokens one by one; a request with
// speculation turned off computes one token per step.
TEST_P(SpeculativeTest, PreemptionMaxTokensAndPerRequestOff) {
  const std::string model = GetParam();
  const ModelConfig config = ModelConfig::from_dir(fixture(model));
  auto prompts = test::quoting_prompts(config.vocab_size, 13);
  const auto more = test::quoting_prompts(config.vocab_size, 17);
  prompts.insert(prompts.end(), more.begin(), more.end());
  GenerateOptions options;
  options.max_tokens = 37;
  options.ignore_eos = true;
  // An arena for about two of the longest requests (prompt and output at most 100 tokens).
  CpuBackend backend;
  const Cohere2Model m = Cohere2Model::load(fixture(model), backend);
  const int64_t tight = spec_test::arena_bytes(m, 2);
  Engine plain(fixture(model), std::make_unique<CpuBackend>(), options_with(4, tight, 0));
  const std::vector<GenerateResult> want = run(plain, prompts, options);
  Engine engine(fixture(model), std::make_unique<CpuBackend>(), options_with(4, tight, 5));
  const std::vector<GenerateResult> got = run(engine, prompts, options);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].ids, want[i].ids) << "prompt " << i;
  EXPECT_GT(engine.stats().num_preemptions, 0);
  EXPECT_GT(engine.stats().spec_accepted_tokens, 0);
  EXPECT_EQ(engine.kv_report().arena.in_use_blocks, 0);

  GenerateOptions off = options;
  off.speculative = false;
  const int64_t verifies = engine.stats().spec_verifies;
  const std::vector<GenerateResult> none = run(engine, prompts, off);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(none[i].ids, want[i].ids) << "prompt " << i;
  EXPECT_EQ(engine.stats().spec_verifies, verifies);
}

// Penalties see the drafts before each row: greedy with penalties strong enough to change which token wins (on
// cohere2-tiny, whose greedy outputs still repeat spans under them, so drafts are accepted; a history without
// the drafts fails this test).
TEST(SpeculativeFixture, GreedyWithPenaltiesIsTheSameAsWithout) {
  const std::string model = "cohere2-tiny";
  const ModelConfig config = ModelConfig::from_dir(fixture(model));
  const auto prompts = test::quoting_prompts(config.vocab_size, 23);
  GenerateOptions options;
  options.max_tokens = 48;
  options.ignore_eos = true;
  options.sampling.frequency_penalty = 0.02;
  options.sampling.presence_penalty = 0.02;
  Engine plain(fixture(model), std::make_unique<CpuBackend>(), options_with(16, int64_t{64} << 20, 0));
  const std::vector<GenerateResult> want = run(plain, prompts, options);
  Engine engine(fixture(model), std::make_unique<CpuBackend>(), options_with(16, int64_t{64} << 20, 6));
  const std::vector<GenerateResult> got = run(engine, prompts, options);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].ids, want[i].ids) << "prompt " << i;
  const EngineStats s = engine.stats();
  std::printf("[ spec     ] %s, greedy with penalties: %ld of %ld drafted tokens accepted\n", model.c_str(),
              static_cast<long>(s.spec_accepted_tokens), static_cast<long>(s.spec_draft_tokens));
  EXPECT_GE(s.spec_accepted_tokens, 20);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SpeculativeTest, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"));

}  // namespace
}  // namespace tide
