// The fixture models with their linear layers quantized to FP8 at load, on the CPU reference: logits at
// every position against the golden f32 reference. FP8 E4M3 keeps 3 mantissa bits where bf16 keeps 7 (a
// rounding unit 16 times larger), and the FP8 path rounds only the linear layers' inputs and weights while a
// bf16 engine rounds every activation and weight; so a correct FP8 path stays within 16 x the error a correct
// bf16 engine has on the same case (hf_bf16_rel_err, measured with transformers). A wrong scale, a transposed
// or misfused weight gives errors of order 1.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "model/checkpoint.h"
#include "model/cohere2.h"
#include "model/quantize.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::fixture;

class Fp8Model : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8Model, LogitsWithinSixteenTimesTheBf16Error) {
  const nlohmann::json g = test::read_json(fixture(GetParam()) / "golden.json");
  const SafetensorsFile tensors = SafetensorsFile::open(fixture(GetParam()) / "golden.safetensors");
  EngineOptions options;
  options.quantization = Quantization::kFp8;
  options.kv_cache_memory = int64_t{64} << 20;
  Engine engine(fixture(GetParam()), std::make_unique<CpuBackend>(), options);
  for (const auto& c : g["cases"]) {
    const std::vector<float> want = test::golden_tensor(tensors, c["logits_tensor"]);
    std::vector<float> got;
    for (const auto& row : engine.prompt_logits(test::ids_of(c["prompt_ids"]), /*all_positions=*/true)) {
      got.insert(got.end(), row.begin(), row.end());
    }
    ASSERT_EQ(got.size(), want.size());
    const double err = test::rel_l2(got.data(), want.data(), got.size());
    const double bf16 = c["hf_bf16_rel_err"].get<double>();
    std::printf("[ fp8      ] %s %s: rel err %.4g = %.1f x transformers' bf16 error\n", GetParam().c_str(),
                c["name"].get<std::string>().c_str(), err, err / bf16);
    EXPECT_LT(err, 16 * bf16) << c["name"];
    EXPECT_GT(err, 0.0);  // the linear layers really ran in FP8
  }
}

// tide quantize writes what --quantization fp8 computes at load: the written checkpoint (one file, or shards
// with an index) loads back as FP8 and gives bit-identical logits; refusals leave nothing behind.
TEST(Fp8Model, QuantizedCheckpointLoadsBackWithIdenticalTensors) {
  const std::filesystem::path model = fixture("cohere2-tiny");
  test::TempDir dir;
  EngineOptions at_load;
  at_load.quantization = Quantization::kFp8;
  at_load.kv_cache_memory = int64_t{16} << 20;
  Engine reference(model, std::make_unique<CpuBackend>(), at_load);
  const std::vector<int32_t> prompt = {5, 100, 200, 300, 400, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29};
  const auto want = reference.prompt_logits(prompt, true);
  for (int64_t shard : {int64_t{4} << 30, int64_t{1} << 20}) {
    const std::filesystem::path out = dir.path() / fmt::format("fp8-{}", shard);
    const QuantizeReport r = quantize_checkpoint_fp8(model, out, shard);
    EXPECT_EQ(r.num_quantized, 7 * 8);  // q, k, v, o, gate, up, down of 8 layers
    EXPECT_EQ(r.num_shards > 1, shard < (int64_t{1} << 30));
    EXPECT_TRUE(std::filesystem::exists(out / (r.num_shards > 1 ? "model.safetensors.index.json" : "model.safetensors")));
    EXPECT_TRUE(std::filesystem::exists(out / "tokenizer.json"));
    const nlohmann::json config = test::read_json(out / "config.json");
    EXPECT_EQ(config["quantization_config"]["quant_method"], "compressed-tensors");
    const Checkpoint ckpt = Checkpoint::open(out);
    const TensorInfo& q = ckpt.require("model.layers.3.self_attn.q_proj.weight");
    EXPECT_EQ(q.dtype, DType::kF8E4M3);
    EXPECT_EQ(ckpt.require("model.layers.3.self_attn.q_proj.weight_scale").shape, (std::vector<int64_t>{q.shape[0], 1}));
    EXPECT_EQ(ckpt.require("model.embed_tokens.weight").dtype, DType::kBF16);

    EngineOptions plain;
    plain.kv_cache_memory = int64_t{16} << 20;
    Engine loaded(out, std::make_unique<CpuBackend>(), plain);  // FP8 from the checkpoint, no flag
    EXPECT_EQ(loaded.prompt_logits(prompt, true), want) << "shard size " << shard;
  }
  // Refused: an existing non-empty folder, the same folder, an FP8 input.
  EXPECT_THROW(quantize_checkpoint_fp8(model, dir.path() / fmt::format("fp8-{}", int64_t{4} << 30)), Error);
  EXPECT_THROW(quantize_checkpoint_fp8(model, model), Error);
  EXPECT_THROW(quantize_checkpoint_fp8(dir.path() / fmt::format("fp8-{}", int64_t{4} << 30), dir.path() / "again"), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "again" / "model.safetensors"));
}

// The codes and scales of a linear weight as the checkpoint written by tide quantize holds them, parts (q, k,
// v or gate, up) concatenated as the loader fuses them.
std::pair<std::vector<uint8_t>, std::vector<float>> quantized_parts(const Checkpoint& ckpt,
                                                                    const std::vector<std::string>& names) {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  for (const std::string& name : names) {
    const TensorInfo& q = ckpt.require(name);
    const auto* c = reinterpret_cast<const uint8_t*>(q.data);
    codes.insert(codes.end(), c, c + q.nbytes);
    const TensorInfo& s = ckpt.require(name + "_scale");
    std::vector<float> f(static_cast<size_t>(s.numel()));
    convert_to_f32(s.data, s.dtype, f.data(), f.size());
    scales.insert(scales.end(), f.begin(), f.end());
  }
  return {codes, scales};
}

// --quantization fp8 on the CPU quantizes F32 and F16 checkpoints from their own values: the same codes and
// scales as tide quantize writes for the same folder (the bf16 fixture is the test above).
TEST(Fp8Model, QuantizeAtLoadEqualsTideQuantizeForFloatCheckpoints) {
  test::TempDir dir;
  for (const DType dtype : {DType::kF32, DType::kF16}) {
    const std::filesystem::path model = dir.path() / std::string(dtype_name(dtype));
    test::write_model_as(fixture("cohere2-tiny"), model, dtype);
    const std::filesystem::path out = dir.path() / (std::string(dtype_name(dtype)) + "-fp8");
    quantize_checkpoint_fp8(model, out);
    const Checkpoint written = Checkpoint::open(out);
    const ModelConfig config = ModelConfig::from_dir(model);
    CpuBackend cpu;
    WeightLoadOptions options;
    options.quantize_fp8 = true;
    const Cohere2Weights w = Cohere2Weights::load(config, Checkpoint::open(model), cpu, options);
    for (size_t i = 0; i < w.layers.size(); ++i) {
      const std::string p = fmt::format("model.layers.{}.", i);
      const std::vector<std::pair<const Linear*, std::vector<std::string>>> linears = {
          {&w.layers[i].qkv, {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"}},
          {&w.layers[i].o, {p + "self_attn.o_proj.weight"}},
          {&w.layers[i].gate_up, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}},
          {&w.layers[i].down, {p + "mlp.down_proj.weight"}}};
      for (const auto& [linear, names] : linears) {
        const auto [codes, scales] = quantized_parts(written, names);
        ASSERT_TRUE(linear->fp8());
        EXPECT_EQ(std::vector<uint8_t>(linear->weight.as<uint8_t>(), linear->weight.as<uint8_t>() + linear->weight.numel()),
                  codes) << dtype_name(dtype) << " " << names.front();
        EXPECT_EQ(std::vector<float>(linear->scale.as<float>(), linear->scale.as<float>() + linear->scale.numel()), scales)
            << dtype_name(dtype) << " " << names.front();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8Model, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"));

}  // namespace
}  // namespace tide
