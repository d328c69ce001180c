// The CUDA backend (bf16) on the bundled demo model (models/tide-demo, trained: logits with real margins)
// against transformers' float64 reference (tests/fixtures/tide-demo): the logits of a held-out prompt within
// twice transformers' own bf16 error, and greedy continuations (256 tokens, past the 64-token window) equal to
// the reference's until a step whose recorded reference top-2 margin is within bf16 noise.
#include "../test_util.h"
#include "bf16_greedy.h"
#include "gpu_test_util.h"
#include "runtime/engine.h"

namespace tide {
namespace {

std::filesystem::path golden_dir() { return test::fixture("tide-demo"); }

Engine cuda_engine(int64_t block_size) {
  EngineOptions o;
  o.block_size = block_size;
  o.kv_cache_memory = int64_t{256} << 20;
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

}  // namespace
}  // namespace tide
