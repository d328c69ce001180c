// Speculative decoding with a draft model and the KV cache (CPU): the draft's blocks lie in the model's arena
// where their bytes fit (the layout) and go back to the model's requests when the arena is short; no step
// speculates while disable_by_batch_size requests run; both proposers over prefix reuse and the host tier.
// Every run gives the ids of decoding without speculation, and no block stays in use.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "speculative_test_util.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::fixture;
using namespace spec_test;

// disable_by_batch_size 2: no draft step and no verify step while two to four requests run; the request
// left alone speculates for its last tokens; the ids are those without speculation.
TEST(DraftLimits, NoSpeculationWhileTheBatchReachesDisableByBatchSize) {
  const ModelConfig config = ModelConfig::from_dir(fixture("cohere2-tiny"));
  const auto prompts = test::quoting_prompts(config.vocab_size, 37);
  ASSERT_EQ(prompts.size(), 4u);
  const int64_t max_tokens[] = {6, 10, 14, 40};
  std::vector<BatchRequest> batch;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateOptions o;
    o.max_tokens = max_tokens[i];
    o.ignore_eos = true;
    batch.push_back(BatchRequest{prompts[i], o});
  }
  Engine plain(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), draft_options(8, int64_t{64} << 20, 0, {}));
  const std::vector<GenerateResult> want = plain.generate_batch(batch);
  EngineOptions o = draft_options(8, int64_t{64} << 20, 0, {});
  o.speculative = spec::SpeculativeConfig::parse(nlohmann::json{{"model", fixture("cohere2-tiny").string()},
                                                                {"num_speculative_tokens", 4},
                                                                {"disable_by_batch_size", 2}}.dump());
  Engine engine(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), o);
  expect_same(engine.generate_batch(batch), want, "disable_by_batch_size 2");
  const EngineStats s = engine.stats();
  // Only the last request's 26 tokens after the third one finished are verified: at most 26 drafts kept (the
  // last token of each verify step is the model's own), at most 26 verify steps, each after a round of at
  // most 4 draft steps; without the limit, the last request alone keeps about 30 of its 40.
  EXPECT_GT(s.spec_verifies, 0);
  EXPECT_LE(s.spec_accepted_tokens, 26);
  EXPECT_LE(s.spec_verifies, 26);
  EXPECT_LE(s.spec_draft_steps, 4 * s.spec_verifies);
  std::printf("[ spec     ] disable_by_batch_size 2: %ld verify steps, %ld of %ld drafts accepted, %ld draft steps\n",
              static_cast<long>(s.spec_verifies), static_cast<long>(s.spec_accepted_tokens),
              static_cast<long>(s.spec_draft_tokens), static_cast<long>(s.spec_draft_steps));
  EXPECT_GE(s.spec_accepted_tokens * 10, s.spec_draft_tokens * 9);  // the model drafting for itself
  expect_caches_empty(engine);
}

// Both proposers over prefix reuse and the host tier: six prompts share a long prefix, the device arena holds
// about two requests, evicted blocks go to a host tier, and the prompts run twice (the second time their
// prefixes come back from the device cache or the host tier). The ids equal those without speculation.
TEST(SpeculationAndTheCache, PrefixReuseAndTheHostTierKeepTheIds) {
  const ModelConfig config = ModelConfig::from_dir(fixture("cohere2-tiny"));
  std::mt19937 rng(51);
  const auto token = [&] { return static_cast<int32_t>(7 + rng() % static_cast<uint32_t>(config.vocab_size - 7)); };
  std::vector<int32_t> shared;
  for (int i = 0; i < 40; ++i) shared.push_back(token());
  std::vector<std::vector<int32_t>> prompts;
  for (int p = 0; p < 6; ++p) {
    std::vector<int32_t> prompt = shared;
    for (int i = 0; i < 6 + p; ++i) prompt.push_back(token());
    prompt.insert(prompt.end(), shared.begin() + 5, shared.begin() + 20);  // something to look up
    prompts.push_back(prompt);
  }
  GenerateOptions options;
  options.max_tokens = 30;
  options.ignore_eos = true;
  CpuBackend backend;
  const Cohere2Model m = Cohere2Model::load(fixture("cohere2-tiny"), backend);
  const int64_t model_bytes = arena_bytes(m, 2);
  const auto with = [&](const char* speculative) {
    EngineOptions o = draft_options(4, model_bytes, 0, {});
    o.host_kv_cache_memory = 8 * model_bytes;
    if (speculative != nullptr) o.speculative = spec::SpeculativeConfig::parse(speculative);  // a draft shares the arena
    return o;
  };
  Engine plain(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), with(nullptr));
  const std::vector<GenerateResult> want_first = run(plain, prompts, options);
  const std::vector<GenerateResult> want_again = run(plain, prompts, options);
  const std::string draft_config = nlohmann::json{{"model", fixture("cohere2-tiny").string()},
                                                  {"num_speculative_tokens", 3}}.dump();
  for (const char* speculative :
       {R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1})", draft_config.c_str()}) {
    Engine engine(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), with(speculative));
    expect_same(run(engine, prompts, options), want_first, std::string(speculative) + ", first pass");
    const int64_t host_blocks = engine.kv_report().arena.host_blocks;
    const std::vector<GenerateResult> again = run(engine, prompts, options);
    expect_same(again, want_again, std::string(speculative) + ", second pass");
    EXPECT_GT(host_blocks, 0) << speculative << ": evicted blocks went to the host tier";
    int64_t cached = 0;
    for (const GenerateResult& r : again) cached += r.cached_tokens;
    EXPECT_GT(cached, 0) << speculative;
    const EngineStats s = engine.stats();
    EXPECT_GT(s.spec_accepted_tokens, 0) << speculative;
    EXPECT_LE(s.spec_accepted_tokens, s.spec_draft_tokens) << speculative;
    EXPECT_EQ(engine.kv_report().arena.in_use_blocks, 0) << speculative;
    if (engine.draft_kv_cache() != nullptr) expect_caches_empty(engine);
  }
}

// A draft whose blocks fit the model's (the same head_dim and KV dtype) takes them from the model's arena: the
// model keeps all of kv_cache_memory, and when the arena is short the draft gives its blocks back before any
// request is preempted for them. Ids as without speculation; both caches empty afterwards. A draft of
// another head_dim has blocks of its own.
TEST(DraftArena, SharedWithTheModelAndGivenBackWhenShort) {
  const ModelConfig config = ModelConfig::from_dir(fixture("cohere2-tiny"));
  auto prompts = test::quoting_prompts(config.vocab_size, 43);
  const auto more = test::quoting_prompts(config.vocab_size, 47);
  prompts.insert(prompts.end(), more.begin(), more.end());
  GenerateOptions options;
  options.max_tokens = 40;
  options.ignore_eos = true;
  CpuBackend backend;
  const Cohere2Model m = Cohere2Model::load(fixture("cohere2-tiny"), backend);
  const int64_t bytes = arena_bytes(m, 3);
  Engine plain(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), draft_options(4, bytes, 0, {}));
  const std::vector<GenerateResult> want = run(plain, prompts, options);
  Engine engine(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(),
                draft_options(4, bytes, 4, fixture("cohere2-tiny")));
  ASSERT_NE(engine.draft_kv_cache(), nullptr);
  EXPECT_EQ(engine.draft_kv_cache()->shared_pool(), engine.kv_cache().shared_pool());
  EXPECT_EQ(engine.kv_report().arena.capacity_blocks, plain.kv_report().arena.capacity_blocks);
  expect_same(run(engine, prompts, options), want, "shared arena");
  const EngineStats s = engine.stats();
  EXPECT_GT(s.spec_accepted_tokens * 10, s.spec_draft_tokens * 9);  // the model drafting for itself
  EXPECT_GT(s.spec_draft_reclaims, 0);
  std::printf("[ spec     ] shared arena: %ld preemptions (%ld without speculation), %ld draft caches given back\n",
              static_cast<long>(s.num_preemptions), static_cast<long>(plain.stats().num_preemptions),
              static_cast<long>(s.spec_draft_reclaims));
  expect_caches_empty(engine);

  Engine other(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(),
               draft_options(4, bytes, 4, fixture("cohere2-tiny-hd128")));
  EXPECT_NE(other.draft_kv_cache()->shared_pool(), other.kv_cache().shared_pool());
  EXPECT_LT(other.kv_report().arena.capacity_blocks, plain.kv_report().arena.capacity_blocks);
}

// Where a draft's blocks lie in the model's arena: the fixture drafting for itself, block for block; the demo
// model's two-layer, one-head draft, four times the positions per block (up to 256); another head_dim, none.
TEST(DraftArena, LayoutFillsTheModelsBlockBytes) {
  CpuBackend backend;
  const Cohere2Model tiny = Cohere2Model::load(fixture("cohere2-tiny"), backend);
  const Cohere2Model tiny128 = Cohere2Model::load(fixture("cohere2-tiny-hd128"), backend);
  const Cohere2Model demo = Cohere2Model::load(test::bundled_model("tide-demo"), backend);
  const Cohere2Model demo_draft = Cohere2Model::load(test::bundled_model("tide-demo-draft"), backend);
  EngineOptions o;
  o.block_size = 4;
  const std::optional<DraftArenaLayout> self = draft_arena_layout(tiny, o, tiny);
  ASSERT_TRUE(self.has_value());
  EXPECT_EQ(self->block_size, 4);
  EXPECT_EQ(self->num_layers, tiny.config().layers_per_kv_block);
  EXPECT_FALSE(draft_arena_layout(tiny, o, tiny128).has_value());
  o.block_size = 16;
  const std::optional<DraftArenaLayout> d = draft_arena_layout(demo, o, demo_draft);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->block_size, 64);
  EXPECT_EQ(d->num_layers, 1);
  // The same bytes as the model's block.
  EXPECT_EQ(d->num_layers * d->block_size * demo_draft.config().num_heads_kv,
            demo.config().layers_per_kv_block * o.block_size * demo.config().num_heads_kv);
  o.block_size = 128;  // at most 256 positions: two layer slots, one used
  const std::optional<DraftArenaLayout> big = draft_arena_layout(demo, o, demo_draft);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(big->block_size, 256);
  EXPECT_EQ(big->num_layers, 2);
}

}  // namespace
}  // namespace tide
