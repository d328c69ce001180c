// The CUDA backend end to end on the golden fixtures, in bf16: logits at every position within twice the
// error transformers itself has in bf16 on an H200 (hf_bf16_rel_err); greedy continuations equal to the
// reference until a step whose reference top-2 margin is within bf16 noise; the seed's reproduction (B with
// prefix reuse equals B without). With an FP8 KV cache (the head_dim 128 fixture): logits within the bound of
// the CPU's FP8 cache (e2e/fp8_kv_cache_test.cpp), and reuse still changes nothing.
#include "../test_util.h"
#include "bf16_greedy.h"
#include "gpu_test_util.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::fixture;

Engine cuda_engine(const std::string& model, int64_t block_size, bool reuse, const std::string& kv_dtype = "") {
  EngineOptions o;
  o.block_size = block_size;
  o.enable_prefix_caching = reuse;
  o.kv_cache_dtype = kv_dtype == "fp8" ? KvCacheDtype::kFp8 : KvCacheDtype::kAuto;
  o.kv_cache_memory = int64_t{256} << 20;
  return Engine(fixture(model), std::make_unique<CudaBackend>(), o);
}

class CudaGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { TIDE_REQUIRE_GPU(); }
  nlohmann::json golden() const { return test::read_json(fixture(GetParam()) / "golden.json"); }
};

TEST_P(CudaGolden, LogitsWithinTwiceTransformersBf16Error) {
  const nlohmann::json g = golden();
  const SafetensorsFile tensors = SafetensorsFile::open(fixture(GetParam()) / "golden.safetensors");
  Engine engine = cuda_engine(GetParam(), 16, true);
  for (const auto& c : g["cases"]) {
    const std::vector<int32_t> prompt = test::ids_of(c["prompt_ids"]);
    const std::vector<float> want = test::golden_tensor(tensors, c["logits_tensor"]);
    const auto rows = engine.prompt_logits(prompt, /*all_positions=*/true);
    std::vector<float> got;
    for (const auto& r : rows) got.insert(got.end(), r.begin(), r.end());
    const double err = test::rel_err(got, want), bound = 2 * c["hf_bf16_rel_err"].get<double>();
    std::printf("[ bf16     ] %s %s: rel err %.4g (transformers bf16 %.4g)\n", GetParam().c_str(),
                c["name"].get<std::string>().c_str(), err, c["hf_bf16_rel_err"].get<double>());
    EXPECT_LT(err, bound) << c["name"];
  }
}

TEST_P(CudaGolden, GreedyAgreesUntilTheReferenceMarginIsWithinBf16Noise) {
  const nlohmann::json g = golden();
  Engine engine = cuda_engine(GetParam(), 16, true);
  EngineOptions cpu_options;
  Engine reference(fixture(GetParam()), std::make_unique<CpuBackend>(), cpu_options);  // f32 = the reference
  const double noise = test::bf16_logit_noise(g);
  for (const auto& c : g["generate"]) {
    const std::vector<int32_t> prompt = test::ids_of(c["prompt_ids"]), want = test::ids_of(c["greedy_ids"]);
    GenerateOptions options;
    options.max_tokens = static_cast<int64_t>(want.size());
    options.ignore_eos = true;
    const std::vector<int32_t> got = engine.generate(prompt, options).ids;
    const test::GreedyAgreement a =
        test::expect_greedy_within_bf16_noise(reference, prompt, want, got, noise, GetParam());
    std::printf("[ bf16     ] %s: greedy agrees on %zu of %zu tokens\n", GetParam().c_str(), a.agree, a.total);
  }
}

TEST_P(CudaGolden, SeedReproductionReuseEqualsNoReuse) {
  const nlohmann::json g = golden();
  for (const auto& c : g["prefix_sharing"]) {
    const std::vector<int32_t> a = test::ids_of(c["a_ids"]), b = test::ids_of(c["b_ids"]);
    GenerateOptions options;
    options.max_tokens = 16;
    options.ignore_eos = true;
    Engine reuse = cuda_engine(GetParam(), 16, true);
    reuse.generate(a, options);
    const GenerateResult with = reuse.generate(b, options);
    Engine fresh = cuda_engine(GetParam(), 16, false);
    const GenerateResult without = fresh.generate(b, options);
    EXPECT_EQ(with.ids, without.ids);
    EXPECT_EQ(with.cached_tokens, c["shared_prefix"].get<int64_t>() / 16 * 16);
  }
}

TEST(CudaGoldenFp8Kv, LogitsWithinSixteenTimesTheBf16ErrorAndReuseChangesNothing) {
  TIDE_REQUIRE_GPU();
  const std::string model = "cohere2-tiny-hd128";
  const nlohmann::json g = test::read_json(fixture(model) / "golden.json");
  const SafetensorsFile tensors = SafetensorsFile::open(fixture(model) / "golden.safetensors");
  Engine engine = cuda_engine(model, 16, true, "fp8");
  for (const auto& c : g["cases"]) {
    const std::vector<float> want = test::golden_tensor(tensors, c["logits_tensor"]);
    std::vector<float> got;
    for (const auto& r : engine.prompt_logits(test::ids_of(c["prompt_ids"]), /*all_positions=*/true)) {
      got.insert(got.end(), r.begin(), r.end());
    }
    const double err = test::rel_err(got, want), bf16 = c["hf_bf16_rel_err"].get<double>();
    std::printf("[ fp8 kv   ] %s %s on the GPU: rel err %.4g = %.1f x transformers' bf16 error\n", model.c_str(),
                c["name"].get<std::string>().c_str(), err, err / bf16);
    EXPECT_LT(err, 16 * bf16) << c["name"];
  }
  GenerateOptions options;
  options.max_tokens = 16;
  options.ignore_eos = true;
  for (const auto& c : g["prefix_sharing"]) {
    Engine reuse = cuda_engine(model, 16, true, "fp8");
    reuse.generate(test::ids_of(c["a_ids"]), options);
    const GenerateResult with = reuse.generate(test::ids_of(c["b_ids"]), options);
    Engine fresh = cuda_engine(model, 16, false, "fp8");
    EXPECT_EQ(with.ids, fresh.generate(test::ids_of(c["b_ids"]), options).ids);
    EXPECT_EQ(with.cached_tokens, c["shared_prefix"].get<int64_t>() / 16 * 16);
  }
  // head_dim 32 has no tensor-core attention: refused when the engine starts, not at its first step.
  EXPECT_THROW(cuda_engine("cohere2-tiny", 16, true, "fp8"), Error);
}

TEST(CudaEngine, AutomaticKvBudgetFillsTheAllowedGpuMemory) {
  TIDE_REQUIRE_GPU();
  for (double utilization : {0.5, 0.9}) {
    EngineOptions o;  // kv_cache_memory 0: automatic
    o.gpu_memory_utilization = utilization;
    Engine engine(fixture("cohere2-tiny"), std::make_unique<CudaBackend>(), o);
    const std::optional<Backend::MemoryInfo> memory = engine.model().backend().memory_info();
    ASSERT_TRUE(memory.has_value());
    const int64_t kv_bytes = int64_t{engine.kv_cache().pool().num_blocks()} * engine.model().kv_block_bytes(16);
    const double allowed = utilization * static_cast<double>(memory->total);
    std::printf("[ kv       ] utilization %.2f: %.1f GiB of KV blocks (%.1f GiB allowed)\n", utilization,
                static_cast<double>(kv_bytes) / (1 << 30), allowed / (1 << 30));
    EXPECT_LE(static_cast<double>(kv_bytes), allowed);
    EXPECT_GT(static_cast<double>(kv_bytes), allowed - 4.0 * (1 << 30));  // the tiny model leaves almost all of it
    GenerateOptions g;
    g.max_tokens = 4;
    EXPECT_EQ(engine.generate(std::vector<int32_t>{5, 17, 42}, g).ids.size() <= 4, true);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGolden, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"));

}  // namespace
}  // namespace tide
