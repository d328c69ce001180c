// Loading weights onto the CUDA backend against the CPU reference: --quantization fp8 quantizes on the GPU
// (the checkpoint's own values uploaded, then Backend::quantize_fp8) and must give the CPU load's E4M3 codes
// and f32 row scales bit for bit, for BF16, F32 and F16 checkpoints of both fixtures; the pinned-staging upload
// copies (and converts) exactly, also across many staging buffers and into row slices; the FP8 quantization
// of F32 rows and of rows longer than the register tile, and the uniform fill, equal the CPU ops; and dummy
// models (bf16, FP8, tied and untied lm_head) generate on the GPU.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "../test_util.h"
#include "backend/cuda/kernels.h"
#include "backend/uniform_fill.h"
#include "gpu_test_util.h"
#include "model/checkpoint.h"
#include "model/cohere2.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::fixture;

template <typename T>
std::vector<T> device_values(Backend& b, const Tensor& t) {
  std::vector<T> out(t.nbytes() / sizeof(T));
  b.download(t, out.data());
  return out;
}

template <typename T>
std::vector<T> host_values(const Tensor& t) {
  return std::vector<T>(t.as<T>(), t.as<T>() + t.nbytes() / sizeof(T));
}

class CudaLoad : public test::CpuAndCudaTest {};

// Every linear layer of `gpu` (loaded on the GPU) has the codes and scales of `cpu` (loaded on the CPU).
void expect_same_fp8(Backend& gpu, const Cohere2Weights& on_gpu, const Cohere2Weights& on_cpu, const std::string& what) {
  ASSERT_EQ(on_gpu.layers.size(), on_cpu.layers.size());
  for (size_t i = 0; i < on_cpu.layers.size(); ++i) {
    const LayerWeights &g = on_gpu.layers[i], &c = on_cpu.layers[i];
    for (const auto& [name, lg, lc] : {std::tuple{"qkv", &g.qkv, &c.qkv}, std::tuple{"o", &g.o, &c.o},
                                       std::tuple{"gate_up", &g.gate_up, &c.gate_up}, std::tuple{"down", &g.down, &c.down}}) {
      ASSERT_TRUE(lg->fp8() && lc->fp8()) << what;
      EXPECT_EQ(lg->weight.shape, lc->weight.shape);
      EXPECT_EQ(device_values<uint8_t>(gpu, lg->weight), host_values<uint8_t>(lc->weight))
          << what << ": codes of layer " << i << " " << name;
      EXPECT_EQ(device_values<float>(gpu, lg->scale), host_values<float>(lc->scale))
          << what << ": scales of layer " << i << " " << name;
    }
  }
}

TEST_F(CudaLoad, QuantizeAtLoadMatchesTheCpuBitForBit) {
  test::TempDir dir;
  WeightLoadOptions options;
  options.quantize_fp8 = true;
  for (const std::string name : {"cohere2-tiny", "cohere2-tiny-hd128"}) {
    for (const DType dtype : {DType::kBF16, DType::kF32, DType::kF16}) {
      std::filesystem::path model = fixture(name);
      if (dtype != DType::kBF16) {  // the fixtures are bf16; copies in the other float dtypes
        model = dir.path() / fmt::format("{}-{}", name, dtype_name(dtype));
        test::write_model_as(fixture(name), model, dtype);
      }
      const ModelConfig config = ModelConfig::from_dir(model);
      const Checkpoint ckpt = Checkpoint::open(model);
      const Cohere2Weights on_gpu = Cohere2Weights::load(config, ckpt, *gpu_, options);
      const Cohere2Weights on_cpu = Cohere2Weights::load(config, ckpt, cpu_, options);
      expect_same_fp8(*gpu_, on_gpu, on_cpu, fmt::format("{} {}", name, dtype_name(dtype)));
      // The embedding stays in the weight dtype: the checkpoint's values rounded to bf16 once.
      const std::vector<uint16_t> embed = device_values<uint16_t>(*gpu_, on_gpu.embed);
      const std::vector<float> want = host_values<float>(on_cpu.embed);
      ASSERT_EQ(embed.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(embed[i], f32_to_bf16(want[i])) << name << " embed " << i;
    }
  }
}

// Without quantization the fused matrices hold the checkpoint's parts row after row, exactly.
TEST_F(CudaLoad, Bf16LoadHoldsTheCheckpointsBytes) {
  const ModelConfig config = ModelConfig::from_dir(fixture("cohere2-tiny"));
  const Checkpoint ckpt = Checkpoint::open(fixture("cohere2-tiny"));
  const Cohere2Weights w = Cohere2Weights::load(config, ckpt, *gpu_);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    std::vector<uint16_t> want;
    for (const char* part : {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}) {
      const TensorInfo& t = ckpt.require(p + part);
      const size_t n = want.size();
      want.resize(n + t.nbytes / 2);
      std::memcpy(want.data() + n, t.data, t.nbytes);
    }
    EXPECT_EQ(device_values<uint16_t>(*gpu_, w.layers[i].qkv.weight), want) << "layer " << i;
  }
}

// An upload larger than all staging buffers together (so each is reused), F32 converted to BF16, and uploads
// into row slices of an existing tensor.
TEST_F(CudaLoad, StagedUploadsConvertExactly) {
  const int64_t rows = 5000, cols = 9000;  // 45M values: 90 MB of bf16, more than 4 x 16 MiB of staging
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < values.size(); ++i) values[i] = uniform_fill::value(3, i, 0.0f, 100.0f);
  const Tensor t = gpu_->upload_as(values.data(), DType::kF32, Shape{rows, cols}, DType::kBF16);
  const std::vector<uint16_t> got = device_values<uint16_t>(*gpu_, t);
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(got[i], f32_to_bf16(values[i])) << i;
  const Tensor f = gpu_->upload_as(values.data(), DType::kF32, Shape{rows, cols}, DType::kF32);
  EXPECT_EQ(device_values<float>(*gpu_, f), values);

  // Rows 10..19 of a zeroed tensor from F16 host data; the other rows stay zero.
  Tensor slab = gpu_->alloc(DType::kBF16, Shape{30, 7});
  std::vector<uint16_t> f16(70);
  for (size_t i = 0; i < f16.size(); ++i) f16[i] = f32_to_f16(static_cast<float>(i) - 35.5f);
  gpu_->upload_into_as(slab.slice_rows(10, 20), f16.data(), DType::kF16);
  const std::vector<uint16_t> s = device_values<uint16_t>(*gpu_, slab);
  for (size_t i = 0; i < s.size(); ++i) {
    const bool inside = i >= 70 && i < 140;
    EXPECT_EQ(s[i], inside ? f32_to_bf16(f16_to_f32(f16[i - 70])) : uint16_t{0}) << i;
  }
}

// quantize_fp8 beyond the register tile: F32 rows of every length, and BF16 rows longer than kMaxRowElements.
TEST_F(CudaLoad, QuantizeF32AndLongRowsMatchesTheCpu) {
  for (const int64_t cols : {int64_t{96}, int64_t{4096}, cuda::kMaxRowElements + 1000}) {
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      const int64_t rows = 5;
      std::vector<float> x = test::random_bf16_values(static_cast<size_t>(rows * cols), 17, 2.0f);
      if (dtype == DType::kF32) {
        for (size_t i = 0; i < x.size(); ++i) x[i] *= 1.0f + 1e-3f * static_cast<float>(i % 7);  // not bf16 values
      }
      for (int64_t i = 0; i < cols; ++i) x[static_cast<size_t>(2 * cols + i)] = 0.0f;  // an all-zero row
      const Tensor xc = cpu_.upload(x.data(), DType::kF32, Shape{rows, cols});
      const Tensor xg = gpu_->upload_as(x.data(), DType::kF32, Shape{rows, cols}, dtype);
      Tensor qc = cpu_.alloc(DType::kF8E4M3, Shape{rows, cols}), sc = cpu_.alloc(DType::kF32, Shape{rows});
      Tensor qg = gpu_->alloc(DType::kF8E4M3, Shape{rows, cols}), sg = gpu_->alloc(DType::kF32, Shape{rows});
      cpu_.quantize_fp8(qc, sc, xc);
      gpu_->quantize_fp8(qg, sg, xg);
      EXPECT_EQ(device_values<float>(*gpu_, sg), host_values<float>(sc)) << cols << " " << dtype_name(dtype);
      EXPECT_EQ(device_values<uint8_t>(*gpu_, qg), host_values<uint8_t>(qc)) << cols << " " << dtype_name(dtype);
    }
  }
}

TEST_F(CudaLoad, FillUniformMatchesTheCpu) {
  const int64_t n = (int64_t{1} << 20) + 13;  // a ragged end past the kernel's 8-element groups
  Tensor c = cpu_.alloc(DType::kF32, Shape{n});
  cpu_.fill_uniform(c, 0.25f, 3e-3f, 99);
  Tensor g32 = gpu_->alloc(DType::kF32, Shape{n}), g16 = gpu_->alloc(DType::kBF16, Shape{n});
  gpu_->fill_uniform(g32, 0.25f, 3e-3f, 99);
  gpu_->fill_uniform(g16, 0.25f, 3e-3f, 99);
  const std::vector<float> want = host_values<float>(c);
  EXPECT_EQ(device_values<float>(*gpu_, g32), want);
  const std::vector<uint16_t> bf = device_values<uint16_t>(*gpu_, g16);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(bf[i], f32_to_bf16(want[i])) << i;
}

// Dummy models on the GPU: bf16 and FP8, tied and untied lm_head; finite logits, tokens generated.
TEST_F(CudaLoad, DummyModelsGenerate) {
  for (const bool tied : {true, false}) {
    test::TempDir dir;
    nlohmann::json config = test::read_json(fixture("cohere2-tiny-hd128/config.json"));
    config["tie_word_embeddings"] = tied;
    config["num_hidden_layers"] = 32;  // R7B's depth, every fourth layer global
    config.erase("layer_types");
    config["sliding_window_pattern"] = 4;
    std::ofstream(dir.path() / "config.json") << config.dump();
    for (const std::string quantization : {"", "fp8"}) {
      EngineOptions options;
      options.load_format = LoadFormat::kDummy;
      options.quantization = quantization.empty() ? Quantization::kNone : Quantization::kFp8;
      options.kv_cache_memory = int64_t{64} << 20;
      Engine engine(dir.path(), std::make_unique<CudaBackend>(), options);
      const std::string what = fmt::format("tied {} quantization '{}'", tied, quantization);
      EXPECT_TRUE(engine.tokenizer().is_stand_in());
      for (const auto& row : engine.prompt_logits(std::vector<int32_t>{5, 6, 7, 8}, true)) {
        for (float v : row) ASSERT_TRUE(std::isfinite(v)) << what;
      }
      GenerateOptions gen;
      gen.max_tokens = 16;
      gen.ignore_eos = true;
      const GenerateResult r = engine.generate(std::vector<int32_t>{5, 100, 200}, gen);
      EXPECT_EQ(r.ids.size(), 16u) << what;
      for (int32_t id : r.ids) EXPECT_TRUE(id >= 0 && id < config["vocab_size"].get<int32_t>()) << what;
    }
  }
}

}  // namespace
}  // namespace tide
