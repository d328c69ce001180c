// Golden tests: tide on the CPU against transformers (float64 reference) on both fixture models —
// logits at every position, greedy continuations by incremental decoding through the paged KV cache
// (block sizes below and above the window), and the prefix-sharing prompts run without reuse.
#include <gtest/gtest.h>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::fixture;

// fixtures/README.md: an f32 engine stays well under 1e-4 relative L2 error.
constexpr double kMaxRelErr = 1e-4;

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::filesystem::path dir() const { return fixture(GetParam()); }
  nlohmann::json golden() const { return test::read_json(dir() / "golden.json"); }
  Engine make_engine(int64_t block_size, int64_t prefill_chunk = 512) const {
    EngineOptions options;
    options.block_size = block_size;
    options.max_prefill_chunk = prefill_chunk;
    options.kv_cache_memory = int64_t{64} << 20;
    return Engine(dir(), std::make_unique<CpuBackend>(), options);
  }
  int64_t window() const { return ModelConfig::from_dir(dir()).layers.front().window; }
};

TEST_P(GoldenTest, LogitsAtEveryPositionMatchReference) {
  const nlohmann::json g = golden();
  const SafetensorsFile tensors = SafetensorsFile::open(dir() / "golden.safetensors");
  Engine engine = make_engine(16);
  for (const auto& c : g["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::vector<int32_t> prompt = test::ids_of(c["prompt_ids"]);
    const std::vector<float> want = test::golden_tensor(tensors, c["logits_tensor"]);
    const auto got = engine.prompt_logits(prompt, /*all_positions=*/true);
    ASSERT_EQ(got.size(), prompt.size());
    const size_t vocab = want.size() / prompt.size();
    const std::vector<int32_t> want_argmax = test::ids_of(c["argmax"]);
    for (size_t p = 0; p < prompt.size(); ++p) {
      ASSERT_EQ(got[p].size(), vocab);
      EXPECT_LT(test::rel_l2(got[p].data(), want.data() + p * vocab, vocab), kMaxRelErr) << "position " << p;
      EXPECT_EQ(test::argmax(got[p]), want_argmax[p]) << "position " << p;
    }
  }
}

TEST_P(GoldenTest, LogitsDoNotDependOnChunkOrBlockSize) {
  // Chunks and blocks smaller than the window, and a chunk that ends mid-block, give the same logits.
  const nlohmann::json g = golden();
  const std::vector<int32_t> prompt = test::ids_of(g["cases"].back()["prompt_ids"]);
  Engine whole = make_engine(16);
  const auto want = whole.prompt_logits(prompt, true);
  for (auto [block, chunk] : {std::pair<int64_t, int64_t>{1, 7}, {5, 3}, {64, 33}}) {
    Engine engine = make_engine(block, chunk);
    const auto got = engine.prompt_logits(prompt, true);
    for (size_t p = 0; p < prompt.size(); ++p) {
      EXPECT_LT(test::rel_l2(got[p].data(), want[p].data(), want[p].size()), 1e-5)
          << "block " << block << " chunk " << chunk << " position " << p;
    }
  }
}

TEST_P(GoldenTest, GreedyContinuationsMatchTokenForToken) {
  const nlohmann::json g = golden();
  // One block size smaller than the window and one larger.
  for (int64_t block : {int64_t{4}, 2 * window() + 8}) {
    Engine engine = make_engine(block);
    for (const auto& c : g["generate"]) {
      const std::vector<int32_t> want = test::ids_of(c["greedy_ids"]);
      GenerateOptions options;
      options.max_tokens = static_cast<int64_t>(want.size());
      options.ignore_eos = true;
      const GenerateResult got = engine.generate(test::ids_of(c["prompt_ids"]), options);
      EXPECT_EQ(got.ids, want) << "block size " << block;
      EXPECT_EQ(got.finish_reason, "length");
    }
    EXPECT_EQ(engine.kv_cache().pool().num_in_use(), 0);
  }
}

TEST_P(GoldenTest, PrefixSharingPromptsWithoutReuse) {
  const nlohmann::json g = golden();
  const SafetensorsFile tensors = SafetensorsFile::open(dir() / "golden.safetensors");
  for (int64_t block : {int64_t{4}, window() + 16}) {
    Engine engine = make_engine(block);
    for (const auto& c : g["prefix_sharing"]) {
      // A first, then B in the same engine: B's results must not depend on A having run.
      const auto a_logits = engine.prompt_logits(test::ids_of(c["a_ids"]), false);
      const std::vector<float> a_want = test::golden_tensor(tensors, c["a_last_tensor"]);
      EXPECT_LT(test::rel_l2(a_logits[0].data(), a_want.data(), a_want.size()), kMaxRelErr);

      const std::vector<int32_t> b = test::ids_of(c["b_ids"]);
      const auto b_logits = engine.prompt_logits(b, false);
      const std::vector<float> b_want = test::golden_tensor(tensors, c["b_last_tensor"]);
      EXPECT_LT(test::rel_l2(b_logits[0].data(), b_want.data(), b_want.size()), kMaxRelErr);

      const std::vector<int32_t> want = test::ids_of(c["b_greedy_ids"]);
      GenerateOptions options;
      options.max_tokens = static_cast<int64_t>(want.size());
      options.ignore_eos = true;
      EXPECT_EQ(engine.generate(b, options).ids, want) << "block size " << block;
    }
  }
}

TEST_P(GoldenTest, BlocksReturnToThePoolsAfterErrorsAndRequestsThatCannotFit) {
  Engine engine = make_engine(4);
  const std::vector<int32_t> prompt = test::ids_of(golden()["generate"][0]["prompt_ids"]);
  GenerateOptions options;
  options.max_tokens = 8;
  int calls = 0;
  EXPECT_THROW(engine.generate(prompt, options, [&](int32_t) {
    if (++calls == 3) throw Error("client went away");
  }),
               Error);
  EXPECT_EQ(engine.kv_cache().pool().num_in_use(), 0);
  options.max_tokens = engine.config().max_position_embeddings;  // prompt + max_tokens > max length
  EXPECT_THROW(engine.generate(prompt, options), Error);
  EXPECT_THROW(engine.generate(std::vector<int32_t>{}, options), Error);
  EXPECT_THROW(engine.prompt_logits(std::vector<int32_t>{5, -1}, false), Error);
  // The engine still works afterwards.
  options.max_tokens = 3;
  options.ignore_eos = true;
  EXPECT_EQ(engine.generate(prompt, options).ids.size(), 3u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"));

}  // namespace
}  // namespace tide
