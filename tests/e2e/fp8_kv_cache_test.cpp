// The FP8 KV cache (--kv-cache-dtype fp8) on the CPU reference, end to end on the fixture models: logits at
// every position against the golden f32 reference, the block budget it buys, and its refusals. Each stored
// K or V vector keeps 3 mantissa bits where bf16 keeps 7 (a rounding unit 16 times larger), and only K and V
// are rounded where a bf16 engine rounds every activation and weight; so a correct FP8 cache stays within 16 x
// the error a correct bf16 engine has on the same case (hf_bf16_rel_err, measured with transformers). A wrong
// scale or a vector read from the wrong place gives errors of order 1. Prefix reuse with an FP8 cache is in
// prefix_cache_test.cpp.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/forwarding_backend.h"
#include "core/error.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::fixture;

// Logits of every case at every position, flattened, with the relative error against the golden ones.
double logits_error(Engine& engine, const nlohmann::json& c, const SafetensorsFile& tensors) {
  const std::vector<float> want = test::golden_tensor(tensors, c["logits_tensor"]);
  std::vector<float> got;
  for (const auto& row : engine.prompt_logits(test::ids_of(c["prompt_ids"]), /*all_positions=*/true)) {
    got.insert(got.end(), row.begin(), row.end());
  }
  EXPECT_EQ(got.size(), want.size());
  return test::rel_l2(got.data(), want.data(), std::min(got.size(), want.size()));
}

class Fp8KvCache : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8KvCache, LogitsWithinSixteenTimesTheBf16Error) {
  const nlohmann::json g = test::read_json(fixture(GetParam()) / "golden.json");
  const SafetensorsFile tensors = SafetensorsFile::open(fixture(GetParam()) / "golden.safetensors");
  for (const std::string quantization : {"", "fp8"}) {
    EngineOptions options;
    options.kv_cache_dtype = KvCacheDtype::kFp8;
    options.quantization = quantization.empty() ? Quantization::kNone : Quantization::kFp8;
    options.kv_cache_memory = int64_t{16} << 20;
    options.max_prefill_chunk = 7;  // later chunks read what earlier ones stored
    Engine engine(fixture(GetParam()), std::make_unique<CpuBackend>(), options);
    for (const auto& c : g["cases"]) {
      const double err = logits_error(engine, c, tensors), bf16 = c["hf_bf16_rel_err"].get<double>();
      std::printf("[ fp8 kv   ] %s %s%s: rel err %.4g = %.1f x transformers' bf16 error\n", GetParam().c_str(),
                  c["name"].get<std::string>().c_str(), quantization.empty() ? "" : ", fp8 weights", err, err / bf16);
      // FP8 weights and an FP8 cache: two independent sources of the same size, each within 16 x.
      EXPECT_LT(err, (quantization.empty() ? 16 : 32) * bf16) << c["name"] << " " << quantization;
      EXPECT_GT(err, 0.0);  // K and V really went through FP8
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8KvCache, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"));

// The same bytes buy more blocks: per position and layer an FP8 cache stores a code per value and a 4-byte
// scale per head's vector, against 4 bytes per value in the CPU backend's F32 cache (3.6 x as many positions
// for cohere2-tiny).
TEST(Fp8KvCache, TheSameBudgetHoldsMoreBlocks) {
  CpuBackend backend;
  const Cohere2Model model = Cohere2Model::load(fixture("cohere2-tiny"), backend);
  const ModelConfig& c = model.config();
  EngineOptions options;
  options.kv_cache_memory = int64_t{8} << 20;
  const KvArenaSpec plain = plan_kv_arena(model, options);
  options.kv_cache_dtype = KvCacheDtype::kFp8;
  const KvArenaSpec fp8 = plan_kv_arena(model, options);
  const int64_t bytes = model.kv_block_bytes(options.block_size, KvCacheDtype::kFp8);
  EXPECT_EQ(bytes, c.layers_per_kv_block * 2 * options.block_size * (c.kv_size() + 4 * c.num_heads_kv));
  const int64_t fp8_bytes = fp8.num_blocks * bytes;
  const int64_t plain_bytes = plain.num_blocks * model.kv_block_bytes(options.block_size);
  EXPECT_LE(fp8_bytes, options.kv_cache_memory);
  EXPECT_LE(plain_bytes, options.kv_cache_memory);
  EXPECT_GT(fp8_bytes, options.kv_cache_memory - bytes);  // the budget is used, not left over
  EXPECT_GT(plain_bytes, options.kv_cache_memory - model.kv_block_bytes(options.block_size));
  EXPECT_GT(fp8.num_blocks, 3 * plain.num_blocks);
}

// Where the backend reports its memory (a GPU), the KV budget leaves room beside the arena for prefill
// attention's FP8 blocks dequantized to bf16: max_num_seqs x max_model_len positions of one layer's K and V,
// at most kFp8KvPrefillScratchBytes; nothing with a bf16 cache.
TEST(Fp8KvCache, AGpuBudgetReservesThePrefillScratch) {
  struct Holder {
    CpuBackend cpu;
  };
  struct WithMemory : Holder, ForwardingBackend {
    WithMemory() : ForwardingBackend(cpu) {}
    std::optional<MemoryInfo> memory_info() const override {
      return MemoryInfo{int64_t{60} << 30, int64_t{80} << 30};
    }
  };
  WithMemory backend;
  const Cohere2Model model = Cohere2Model::load(fixture("cohere2-tiny"), backend);
  const int64_t bf16_position = 2 * model.config().kv_size() * 2;  // K and V of one layer
  // The budget an FP8 cache gives up against a bf16 one, with the same options.
  const auto reserved = [&](EngineOptions options) {
    options.kv_cache_dtype = KvCacheDtype::kAuto;
    const int64_t plain = resolve_engine_options(options, model).kv_cache_memory;
    options.kv_cache_dtype = KvCacheDtype::kFp8;
    const EngineOptions fp8 = resolve_engine_options(options, model);
    EXPECT_GT(fp8.kv_cache_memory, 0);
    return plain - fp8.kv_cache_memory;
  };
  EngineOptions options;  // kv_cache_memory 0: from the memory the backend reports
  options.max_num_seqs = 4;
  options.max_model_len = 1000;
  EXPECT_EQ(reserved(options), 4 * 1000 * bf16_position);
  options.max_num_seqs = 1024;
  options.max_model_len = 0;  // the model's 8192: 2 GiB of positions, more than the scratch takes
  ASSERT_GT(1024 * model.config().max_position_embeddings * bf16_position, kFp8KvPrefillScratchBytes);
  EXPECT_EQ(reserved(options), kFp8KvPrefillScratchBytes);
}

// The error an engine with `options` on `backend` refuses to start with ("" if it starts).
std::string refusal(std::unique_ptr<Backend> backend, const EngineOptions& options) {
  try {
    Engine engine(fixture("cohere2-tiny"), std::move(backend), options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A backend without an FP8 KV cache for the model's head_dim (the CUDA backend outside 64 / 128 / 256) is
// refused naming the option (an unknown dtype is refused where the flag is read: cli_test.cpp).
TEST(Fp8KvCache, RefusedWhereUnsupported) {
  struct Holder {
    CpuBackend cpu;
  };
  struct NoFp8Kv : Holder, ForwardingBackend {
    NoFp8Kv() : ForwardingBackend(cpu) {}
    bool supports_fp8_kv(int64_t) const override { return false; }
  };
  EngineOptions options;
  options.kv_cache_memory = int64_t{16} << 20;
  options.kv_cache_dtype = KvCacheDtype::kFp8;
  EXPECT_NE(refusal(std::make_unique<NoFp8Kv>(), options)
                .find("kv_cache_dtype fp8: the cpu backend has no FP8 KV cache for this model's head_dim 32"),
            std::string::npos);
  EXPECT_EQ(refusal(std::make_unique<CpuBackend>(), options), "");
  options.kv_cache_dtype = KvCacheDtype::kAuto;
  EXPECT_EQ(refusal(std::make_unique<NoFp8Kv>(), options), "");
}

}  // namespace
}  // namespace tide
