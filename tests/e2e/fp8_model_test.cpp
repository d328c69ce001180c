// The fixture models with their linear layers quantized to FP8 at load, on the CPU reference: logits at
// every position against the golden f32 reference. FP8 E4M3 keeps 3 mantissa bits where bf16 keeps 7 (a
// rounding unit 16 times larger), and the FP8 path rounds only the linear layers' inputs and weights while a
// bf16 engine rounds every activation and weight; so a correct FP8 path stays within 16 x the error a correct
// bf16 engine has on the same case (hf_bf16_rel_err, measured with transformers). A wrong scale, a transposed
// or misfused weight gives errors of order 1.
#include <gtest/gtest.h>

#include <cstdio>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::fixture;

class Fp8Model : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8Model, LogitsWithinSixteenTimesTheBf16Error) {
  const nlohmann::json g = test::read_json(fixture(GetParam()) / "golden.json");
  const SafetensorsFile tensors = SafetensorsFile::open(fixture(GetParam()) / "golden.safetensors");
  EngineOptions options;
  options.quantization = "fp8";
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

TEST(Fp8Model, UnknownQuantizationIsRefused) {
  EngineOptions options;
  options.quantization = "int4";
  EXPECT_THROW(Engine(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), options), Error);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8Model, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"));

}  // namespace
}  // namespace tide
