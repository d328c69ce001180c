// Sampling through the engine on the tiny fixture model: the history the engine hands the sample op
// (prompt and output counts) is the one the penalties need, seeded runs repeat, and an unseeded run still
// produces valid tokens.
#include <gtest/gtest.h>

#include <map>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "runtime/engine.h"

namespace tide {
namespace {

Engine make_engine() {
  EngineOptions options;
  options.kv_cache_memory = int64_t{64} << 20;
  options.enable_prefix_caching = false;
  return Engine(test::fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), options);
}

TEST(SamplingE2e, GreedyWithPenaltiesIsTheArgmaxOfThePenalizedLogits) {
  Engine engine = make_engine();
  const std::vector<int32_t> prompt = engine.tokenizer().encode("def fibonacci(n): return fibonacci(n - 1)");
  GenerateOptions options;
  options.max_tokens = 8;
  options.ignore_eos = true;
  options.sampling.repetition_penalty = 1.5;
  options.sampling.presence_penalty = 0.7;
  options.sampling.frequency_penalty = 0.4;
  const GenerateResult result = engine.generate(prompt, options);
  ASSERT_EQ(result.ids.size(), 8u);

  // Step by step: the model's logits for the text so far, penalized by hand from the counts.
  std::vector<int32_t> text = prompt;
  for (size_t step = 0; step < result.ids.size(); ++step) {
    std::vector<float> logits = engine.prompt_logits(text, /*all_positions=*/false).front();
    std::map<int32_t, std::pair<int, int>> counts;  // id -> (prompt, output)
    for (int32_t id : prompt) ++counts[id].first;
    for (size_t i = 0; i < step; ++i) ++counts[result.ids[i]].second;
    for (const auto& [id, c] : counts) {
      logits[id] = sampling::penalized(logits[id], c.first, c.second, 1.5f, 0.7f, 0.4f);
    }
    EXPECT_EQ(result.ids[step], test::argmax(logits)) << "step " << step;
    text.push_back(result.ids[step]);
  }
}

TEST(SamplingE2e, SeededRunsRepeatAndUnseededRunsWork) {
  Engine engine = make_engine();
  const std::vector<int32_t> prompt = engine.tokenizer().encode("Hello world");
  GenerateOptions options;
  options.max_tokens = 16;
  options.ignore_eos = true;
  options.sampling.temperature = 1.0;
  options.sampling.top_p = 0.95;
  options.sampling.min_p = 0.01;
  options.sampling.frequency_penalty = 0.5;
  options.sampling.seed = 11;
  const GenerateResult a = engine.generate(prompt, options);
  EXPECT_EQ(engine.generate(prompt, options).ids, a.ids);
  options.sampling.seed = 12;
  EXPECT_NE(engine.generate(prompt, options).ids, a.ids);
  options.sampling.seed.reset();
  const GenerateResult c = engine.generate(prompt, options);
  ASSERT_EQ(c.ids.size(), 16u);
  for (int32_t id : c.ids) EXPECT_TRUE(id >= 0 && id < engine.config().vocab_size);
}

}  // namespace
}  // namespace tide
