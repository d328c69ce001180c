// --load-format dummy on the CPU reference: a folder holding only a config.json loads random weights of its
// shapes (no checkpoint read) and the stand-in tokenizer, and generates; the weights are the same on every
// load, FP8 and untied lm_head configs load too, and activations stay finite through many layers.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "model/cohere2.h"
#include "runtime/engine.h"

namespace tide {
namespace {

// A temp folder with the tiny fixture's config.json, edited by `edit`, and nothing else.
class ConfigOnlyFolder {
 public:
  explicit ConfigOnlyFolder(const std::function<void(nlohmann::json&)>& edit = {}) {
    nlohmann::json config = test::read_json(test::fixture("cohere2-tiny/config.json"));
    if (edit) edit(config);
    std::ofstream(dir_.path() / "config.json") << config.dump(2);
  }
  const std::filesystem::path& path() const { return dir_.path(); }

 private:
  test::TempDir dir_;
};

EngineOptions dummy_options(const std::string& quantization = "") {
  EngineOptions options;
  options.load_format = LoadFormat::kDummy;
  options.quantization = quantization == "fp8" ? Quantization::kFp8 : Quantization::kNone;
  options.kv_cache_memory = int64_t{16} << 20;
  return options;
}

GenerateResult generate(Engine& engine) {
  GenerateOptions gen;
  gen.max_tokens = 12;
  gen.ignore_eos = true;
  return engine.generate(std::vector<int32_t>{5, 100, 200, 300, 400}, gen);
}

TEST(DummyLoad, ConfigOnlyFolderGeneratesOnTheCpu) {
  const ConfigOnlyFolder folder;
  Engine engine(folder.path(), std::make_unique<CpuBackend>(), dummy_options());
  EXPECT_TRUE(engine.tokenizer().is_stand_in());
  const GenerateResult r = generate(engine);
  EXPECT_EQ(r.finish_reason, "length");
  ASSERT_EQ(r.ids.size(), 12u);
  for (int32_t id : r.ids) EXPECT_TRUE(id >= 0 && id < 1024) << id;
  EXPECT_EQ(r.text, engine.tokenizer().decode(r.ids, /*skip_special_tokens=*/true));
  EXPECT_FALSE(r.text.empty());

  // The same weights on every load: the same logits, bit for bit.
  Engine again(folder.path(), std::make_unique<CpuBackend>(), dummy_options());
  const std::vector<int32_t> prompt = {5, 17, 900, 3};
  EXPECT_EQ(engine.prompt_logits(prompt, true), again.prompt_logits(prompt, true));
  EXPECT_EQ(generate(again).ids, r.ids);
}

TEST(DummyLoad, WeightsHaveTheConfigsShapesAndRange) {
  const ConfigOnlyFolder folder;
  const ModelConfig config = ModelConfig::from_dir(folder.path());
  CpuBackend cpu;
  const Cohere2Weights w = Cohere2Weights::dummy(config, cpu);
  EXPECT_EQ(w.embed.shape, (Shape{1024, 256}));
  EXPECT_EQ(w.lm_head.data, w.embed.data);  // tied
  ASSERT_EQ(w.layers.size(), 8u);
  EXPECT_EQ(w.layers[3].qkv.weight.shape, (Shape{config.qkv_size(), 256}));
  EXPECT_EQ(w.layers[3].gate_up.weight.shape, (Shape{2 * config.intermediate_size, 256}));
  EXPECT_FALSE(w.has_fp8());
  for (const Tensor* t : {&w.embed, &w.layers[0].qkv.weight, &w.layers[7].down.weight}) {
    float lo = 1, hi = -1;
    for (int64_t i = 0; i < t->numel(); ++i) {
      lo = std::min(lo, t->as<float>()[i]);
      hi = std::max(hi, t->as<float>()[i]);
    }
    EXPECT_GE(lo, -kDummyWeightScale);
    EXPECT_LT(hi, kDummyWeightScale);
    EXPECT_LT(lo, -0.9f * kDummyWeightScale);  // the whole range is used
    EXPECT_GT(hi, 0.9f * kDummyWeightScale);
  }
  for (int64_t i = 0; i < 256; ++i) EXPECT_EQ(w.layers[5].input_norm.as<float>()[i], 1.0f);
  // Tensors differ from one another (a seed each).
  EXPECT_NE(w.layers[0].o.weight.as<float>()[0], w.layers[1].o.weight.as<float>()[0]);
}

TEST(DummyLoad, Fp8AndUntiedLmHead) {
  const ConfigOnlyFolder untied([](nlohmann::json& c) { c["tie_word_embeddings"] = false; });
  const ModelConfig config = ModelConfig::from_dir(untied.path());
  CpuBackend cpu;
  WeightLoadOptions fp8;
  fp8.quantize_fp8 = true;
  const Cohere2Weights w = Cohere2Weights::dummy(config, cpu, fp8);
  EXPECT_TRUE(w.has_fp8());
  EXPECT_NE(w.lm_head.data, w.embed.data);
  EXPECT_EQ(w.lm_head.dtype, DType::kF32);  // the embedding and lm_head stay in the weight dtype
  EXPECT_EQ(w.layers[2].down.weight.dtype, DType::kF8E4M3);
  EXPECT_EQ(w.layers[2].down.scale.numel(), 256);

  for (const std::string quantization : {"", "fp8"}) {
    Engine engine(untied.path(), std::make_unique<CpuBackend>(), dummy_options(quantization));
    const GenerateResult r = generate(engine);
    EXPECT_EQ(r.ids.size(), 12u) << quantization;
  }
}

// LayerNorm brings every layer's input back to unit variance, so the dummy weights' small outputs add up to a
// finite residual whatever the depth: 64 layers (Command-A's count) give finite, not all equal logits.
TEST(DummyLoad, LogitsStayFiniteThroughManyLayers) {
  const ConfigOnlyFolder deep([](nlohmann::json& c) { c["num_hidden_layers"] = 64; });
  for (const std::string quantization : {"", "fp8"}) {
    Engine engine(deep.path(), std::make_unique<CpuBackend>(), dummy_options(quantization));
    const auto logits = engine.prompt_logits(std::vector<int32_t>{5, 6, 7, 8, 9, 10, 11, 12}, true);
    ASSERT_EQ(logits.size(), 8u);
    for (const std::vector<float>& row : logits) {
      for (float v : row) ASSERT_TRUE(std::isfinite(v)) << quantization;
      EXPECT_NE(*std::min_element(row.begin(), row.end()), *std::max_element(row.begin(), row.end()));
    }
  }
}

// An unknown load format is refused where the flag is read (cli_test.cpp).
TEST(DummyLoad, BrokenTokenizerIsRefused) {
  const ConfigOnlyFolder folder;
  // A folder with a corrupt tokenizer.json does not fall back to the stand-in.
  std::ofstream(folder.path() / "tokenizer.json") << "not json";
  EXPECT_THROW(Engine(folder.path(), std::make_unique<CpuBackend>(), dummy_options()), Error);
}

}  // namespace
}  // namespace tide
