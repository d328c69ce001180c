// Speculative decoding (prompt lookup) on the GPU: verify steps (several query tokens and sample rows per
// request, mixed with other requests' decodes) need not give a decode step's bf16 bits (a larger model's
// matmuls run on other kernels over more tokens; the attention's splits follow the batch), so every golden
// case must meet the bf16 greedy rule against the f32 CPU
// reference (bf16_greedy.h), prompts that quote themselves (mostly verify steps) the same rule with twice its
// bound, drafts must be accepted, and no block may stay in use. A fixture drafting for itself (draft-model
// speculation): greedy ids under the same rule; sampled requests draw drafts from the draft's distribution and
// check them on the GPU's sample op (sample_with_drafts), which must accept nearly all of them (p and q differ by
// bf16 noise alone).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "bf16_greedy.h"
#include "gpu_test_util.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::fixture;

class CudaSpeculative : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { TIDE_REQUIRE_GPU(); }
};

TEST_P(CudaSpeculative, GoldenGreedyWithinBf16NoiseAndDraftsAccepted) {
  const std::string name = GetParam();
  const nlohmann::json g = test::read_json(fixture(name) / "golden.json");
  EngineOptions cpu_options;
  cpu_options.kv_cache_memory = int64_t{64} << 20;
  Engine reference(fixture(name), std::make_unique<CpuBackend>(), cpu_options);
  const double noise = test::bf16_logit_noise(g);
  for (const int64_t block : {int64_t{3}, int64_t{16}}) {
    EngineOptions o;
    o.block_size = block;
    o.kv_cache_memory = int64_t{256} << 20;
    o.speculative =
        spec::SpeculativeConfig::parse(R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1})");
    Engine engine(fixture(name), std::make_unique<CudaBackend>(), o);
    std::vector<BatchRequest> batch;
    std::vector<std::vector<int32_t>> want;
    GenerateOptions options;
    options.ignore_eos = true;
    for (const auto& c : g["generate"]) {
      want.push_back(test::ids_of(c["greedy_ids"]));
      options.max_tokens = static_cast<int64_t>(want.back().size());
      batch.push_back(BatchRequest{test::ids_of(c["prompt_ids"]), options});
    }
    // Prompts that quote a span of themselves (prompt lookup finds drafts there), with the f32 engine's ids.
    for (const std::vector<int32_t>& prompt : test::quoting_prompts(engine.config().vocab_size, 7)) {
      options.max_tokens = 40;
      want.push_back(reference.generate(prompt, options).ids);
      batch.push_back(BatchRequest{prompt, options});
    }
    const std::vector<GenerateResult> results = engine.generate_batch(batch);
    size_t agree = 0, total = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      // The golden cases under the decode tests' bound; the quoting prompts, where drafts are accepted and most
      // tokens come from verify steps, under twice that bound: a verify step's bf16 logits come from matmuls
      // over more tokens (other cuBLASLt kernels, another summation order) and, in a step that also carries a
      // prompt chunk, from the prefill attention kernel (one step of cohere2-tiny-hd128 measured 1.4x the
      // decode tests' bound).
      const bool golden = i < g["generate"].size();
      const test::GreedyAgreement a = test::expect_greedy_within_bf16_noise(
          reference, batch[i].prompt, want[i], results[i].ids, golden ? noise : 2 * noise,
          name + " case " + std::to_string(i));
      agree += a.agree;
      total += a.total;
    }
    const EngineStats s = engine.stats();
    std::printf("[ spec     ] %s block %ld: greedy agrees on %zu of %zu tokens; %ld of %ld drafted tokens accepted\n",
                name.c_str(), static_cast<long>(block), agree, total, static_cast<long>(s.spec_accepted_tokens),
                static_cast<long>(s.spec_draft_tokens));
    EXPECT_GT(s.spec_accepted_tokens, 0);
    EXPECT_EQ(engine.kv_cache().pool().num_in_use(), 0);
  }
}

TEST_P(CudaSpeculative, DraftingForItselfGreedyWithinBf16NoiseAndSampledDraftsAccepted) {
  const std::string name = GetParam();
  const nlohmann::json g = test::read_json(fixture(name) / "golden.json");
  EngineOptions cpu_options;
  cpu_options.kv_cache_memory = int64_t{64} << 20;
  Engine reference(fixture(name), std::make_unique<CpuBackend>(), cpu_options);
  EngineOptions o;
  o.block_size = 16;
  o.kv_cache_memory = int64_t{256} << 20;
  o.speculative = spec::SpeculativeConfig::parse(
      nlohmann::json{{"model", fixture(name).string()}, {"num_speculative_tokens", 4}}.dump());
  Engine engine(fixture(name), std::make_unique<CudaBackend>(), o);
  std::vector<BatchRequest> batch;
  GenerateOptions options;
  options.ignore_eos = true;
  for (const auto& c : g["generate"]) {
    options.max_tokens = static_cast<int64_t>(c["greedy_ids"].size());
    batch.push_back(BatchRequest{test::ids_of(c["prompt_ids"]), options});
  }
  const std::vector<GenerateResult> results = engine.generate_batch(batch);
  for (size_t i = 0; i < batch.size(); ++i) {
    test::expect_greedy_within_bf16_noise(reference, batch[i].prompt, test::ids_of(g["generate"][i]["greedy_ids"]),
                                          results[i].ids, test::bf16_logit_noise(g), name + " case " + std::to_string(i));
  }
  const EngineStats greedy = engine.stats();
  EXPECT_GT(greedy.spec_accepted_tokens, greedy.spec_draft_tokens * 9 / 10);

  GenerateOptions sampled;
  sampled.ignore_eos = true;
  sampled.max_tokens = 48;
  sampled.n = 2;
  sampled.sampling.temperature = 0.8;
  sampled.sampling.top_k = 40;
  sampled.sampling.top_p = 0.95;
  sampled.sampling.seed = 7;
  std::vector<BatchRequest> sampled_batch;
  for (const auto& c : g["generate"]) sampled_batch.push_back(BatchRequest{test::ids_of(c["prompt_ids"]), sampled});
  for (const GenerateResult& r : engine.generate_batch(sampled_batch)) {
    for (const SampleResult& sample : r.samples) EXPECT_EQ(sample.ids.size(), 48u);
  }
  const EngineStats s = engine.stats();
  const int64_t drafted = s.spec_draft_tokens - greedy.spec_draft_tokens;
  const int64_t accepted = s.spec_accepted_tokens - greedy.spec_accepted_tokens;
  std::printf("[ spec     ] %s drafting for itself: greedy %ld of %ld drafts accepted, sampled %ld of %ld\n", name.c_str(),
              static_cast<long>(greedy.spec_accepted_tokens), static_cast<long>(greedy.spec_draft_tokens),
              static_cast<long>(accepted), static_cast<long>(drafted));
  EXPECT_GT(drafted, 100);
  EXPECT_GT(accepted, drafted * 85 / 100);
  EXPECT_EQ(engine.kv_cache().pool().num_in_use(), 0);
  ASSERT_NE(engine.draft_kv_cache(), nullptr);
  EXPECT_EQ(engine.draft_kv_cache()->pool().stats().in_use_blocks, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaSpeculative, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"));

}  // namespace
}  // namespace tide
