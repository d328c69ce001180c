// The CUDA backend (bf16) on the bundled demo model (models/tide-demo, trained: logits with real margins)
// against transformers' float64 reference (tests/fixtures/tide-demo): the logits of a held-out prompt within
// twice transformers' own bf16 error, and greedy continuations (256 tokens, past the 64-token window) equal to
// the reference's until a step whose recorded reference top-2 margin is within bf16 noise; speculative decoding
// at batch 1 with the ids of decoding without it.
#include <cstdio>
#include <string>

#include "../test_util.h"
#include "bf16_greedy.h"
#include "gpu_test_util.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace tide {
namespace {

std::filesystem::path golden_dir() { return test::fixture("tide-demo"); }

Engine cuda_engine(int64_t block_size, const std::string& speculative_config = {}) {
  EngineOptions o;
  o.block_size = block_size;
  o.kv_cache_memory = int64_t{256} << 20;
  if (!speculative_config.empty()) o.speculative = spec::SpeculativeConfig::parse(speculative_config);
  return Engine(test::bundled_model("tide-demo"), std::make_unique<CudaBackend>(), o);
}

class CudaDemoModel : public ::testing::Test {
 protected:
  void SetUp() override { TIDE_REQUIRE_GPU(); }
  nlohmann::json golden() const { return test::read_json(golden_dir() / "golden.json"); }
};

TEST_F(CudaDemoModel, LogitsWithinTwiceTransformersBf16Error) {
  const nlohmann::json g = golden();
  const SafetensorsFile tensors = SafetensorsFile::open(golden_dir() / "golden.safetensors");
  Engine engine = cuda_engine(16);
  for (const auto& c : g["cases"]) {
    const std::vector<float> want = test::golden_tensor(tensors, c["logits_tensor"]);
    const auto rows = engine.prompt_logits(test::ids_of(c["prompt_ids"]), /*all_positions=*/true);
    std::vector<float> got;
    for (const auto& r : rows) got.insert(got.end(), r.begin(), r.end());
    const double err = test::rel_err(got, want), hf = c["hf_bf16_rel_err"].get<double>();
    std::printf("[ bf16     ] tide-demo %s: rel err %.4g (transformers bf16 %.4g)\n",
                c["name"].get<std::string>().c_str(), err, hf);
    EXPECT_LT(err, 2 * hf);
  }
}

// The rule of bf16_greedy.h with the margins the reference recorded at each step: the first step where the
// ids differ must be one whose margin is below noise × the rms of that step's logits.
TEST_F(CudaDemoModel, GreedyAgreesUntilTheReferenceMarginIsWithinBf16Noise) {
  const nlohmann::json g = golden();
  const double noise = test::bf16_logit_noise(g);
  for (int64_t block : {int64_t{16}, int64_t{96}}) {
    Engine engine = cuda_engine(block);
    for (const auto& c : g["generate"]) {
      const std::string name = c["name"];
      const std::vector<int32_t> want = test::ids_of(c["greedy_ids"]);
      const std::vector<double> margins = c["margins"], rms = c["logit_rms"];
      GenerateOptions options;
      options.max_tokens = static_cast<int64_t>(want.size());
      options.ignore_eos = true;
      const std::vector<int32_t> got = engine.generate(test::ids_of(c["prompt_ids"]), options).ids;
      ASSERT_EQ(got.size(), want.size()) << name;
      const size_t agree =
          static_cast<size_t>(std::mismatch(got.begin(), got.end(), want.begin()).first - got.begin());
      std::printf("[ bf16     ] tide-demo %s, block %lld: greedy agrees on %zu of %zu tokens (transformers bf16: "
                  "%d)\n",
                  name.c_str(), static_cast<long long>(block), agree, want.size(),
                  c["hf_bf16_greedy_agree"].get<int>());
      if (agree < want.size()) {
        EXPECT_LT(margins[agree], noise * rms[agree])
            << name << ", block " << block << ": diverged at step " << agree << " with a clear reference margin";
      }
    }
  }
}

// Speculation at batch 1 gives the ids of decoding without it, exactly: the demo model's and its draft's
// matmuls all run on the small-batch kernel (cuda::bf16_small_matmul_preferred), whose rows for a token do not
// depend on how many tokens a step brings, and the decode attention computes each of a verify step's rows as a
// decode step computes its one. Prompt lookup and the distilled draft (models/tide-demo-draft), k = 4, greedy,
// one request at a time, past the 64-token window: prompts that quote a passage (most drafts accepted) and the
// golden prompts.
TEST_F(CudaDemoModel, SpeculationAtBatchOneGivesTheIdsOfDecoding) {
  const Tokenizer tokenizer = Tokenizer::from_dir(test::bundled_model("tide-demo"));
  std::vector<std::vector<int32_t>> prompts;
  for (size_t cut : {40, 120}) prompts.push_back(tokenizer.encode(test::quoted_passage(cut)));
  for (const auto& c : golden()["generate"]) prompts.push_back(test::ids_of(c["prompt_ids"]));
  GenerateOptions options;
  options.max_tokens = 160;
  options.ignore_eos = true;
  Engine plain = cuda_engine(16);
  std::vector<std::vector<int32_t>> want;
  for (const std::vector<int32_t>& prompt : prompts) want.push_back(plain.generate(prompt, options).ids);
  const std::string draft = test::bundled_model("tide-demo-draft").string();
  for (const std::string& config :
       {std::string(R"({"method": "ngram", "num_speculative_tokens": 4})"),
        nlohmann::json{{"model", draft}, {"num_speculative_tokens", 4}}.dump()}) {
    Engine engine = cuda_engine(16, config);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(engine.generate(prompts[i], options).ids, want[i]) << config << ", prompt " << i;
    }
    const EngineStats s = engine.stats();
    std::printf("[ spec     ] tide-demo %s: %ld of %ld drafted tokens accepted\n", config.c_str(),
                static_cast<long>(s.spec_accepted_tokens), static_cast<long>(s.spec_draft_tokens));
    EXPECT_GT(s.spec_accepted_tokens, s.spec_draft_tokens / 2) << config;
  }
}

}  // namespace
}  // namespace tide
