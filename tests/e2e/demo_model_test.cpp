// The bundled demo model (models/tide-demo: a small Cohere2 trained by tools/demo_model) against transformers
// (tests/fixtures/tide-demo, float64 reference): its tokenizer and chat template, the logits at every position
// of a held-out prompt, and greedy continuations token for token, 256 tokens past a 64-token window. A trained
// model's logits have real margins, where the random fixtures' are mostly noise.
#include <gtest/gtest.h>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "../chat_cases.h"
#include "chat/chat_template.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace tide {
namespace {

// fixtures/README.md: an f32 engine stays well under 1e-4 relative L2 error.
constexpr double kMaxRelErr = 1e-4;

std::filesystem::path model_dir() { return test::bundled_model("tide-demo"); }
std::filesystem::path golden_dir() { return test::fixture("tide-demo"); }

Engine make_engine(int64_t block_size) {
  EngineOptions options;
  options.block_size = block_size;
  options.kv_cache_memory = int64_t{64} << 20;
  return Engine(model_dir(), std::make_unique<CpuBackend>(), options);
}

TEST(DemoModel, ConfigHasSlidingAndGlobalLayers) {
  const ModelConfig config = ModelConfig::from_dir(model_dir());
  int sliding = 0, global = 0;
  for (const auto& layer : config.layers) (layer.is_global() ? global : sliding)++;
  EXPECT_EQ(sliding, 6);
  EXPECT_EQ(global, 2);
  EXPECT_EQ(config.layers.front().window, 64);
}

TEST(DemoModel, TokenizerMatchesHuggingFaceTokenizers) {
  const Tokenizer tokenizer = Tokenizer::from_dir(model_dir());
  EXPECT_EQ(tokenizer.vocab_size(), 4096);
  EXPECT_EQ(tokenizer.bos_id(), 5);
  EXPECT_EQ(tokenizer.eos_id(), tokenizer.token_to_id("<|END_OF_TURN_TOKEN|>"));
  const nlohmann::json cases = test::read_json(golden_dir() / "tokenizer_cases.json")["cases"];
  ASSERT_GE(cases.size(), 30u);
  for (const auto& c : cases) {
    const std::string text = c["text"];
    SCOPED_TRACE("text: " + text);
    EXPECT_EQ(tokenizer.encode(text), test::ids_of(c["ids"]));
    EXPECT_EQ(tokenizer.encode(text, /*add_special_tokens=*/false), test::ids_of(c["ids_no_special"]));
    const std::vector<int32_t> ids = test::ids_of(c["ids"]);
    EXPECT_EQ(tokenizer.decode(ids, /*skip_special_tokens=*/true), c["decoded"].get<std::string>());
    EXPECT_EQ(tokenizer.decode(ids, /*skip_special_tokens=*/false), c["decoded_with_special"].get<std::string>());
  }
}

TEST(DemoModel, ChatTemplateRendersLikeTransformers) {
  const auto chat = ChatTemplate::from_model_dir(model_dir());
  ASSERT_TRUE(chat.has_value());
  const Tokenizer tokenizer = Tokenizer::from_dir(model_dir());
  const nlohmann::json cases = test::read_json(golden_dir() / "chat_cases.json")["cases"];
  const int num_errors = test::check_chat_cases(*chat, tokenizer, cases);
  EXPECT_EQ(num_errors, 1);
}

TEST(DemoModel, LogitsAtEveryPositionMatchReference) {
  const nlohmann::json g = test::read_json(golden_dir() / "golden.json");
  const SafetensorsFile tensors = SafetensorsFile::open(golden_dir() / "golden.safetensors");
  Engine engine = make_engine(16);
  for (const auto& c : g["cases"]) {
    const std::vector<int32_t> prompt = test::ids_of(c["prompt_ids"]);
    ASSERT_GT(prompt.size(), 2u * 64);  // past two windows
    const std::vector<float> want = test::golden_tensor(tensors, c["logits_tensor"]);
    const auto got = engine.prompt_logits(prompt, /*all_positions=*/true);
    ASSERT_EQ(got.size(), prompt.size());
    const size_t vocab = want.size() / prompt.size();
    const std::vector<int32_t> want_argmax = test::ids_of(c["argmax"]);
    double worst = 0;
    for (size_t p = 0; p < prompt.size(); ++p) {
      ASSERT_EQ(got[p].size(), vocab);
      const double err = test::rel_l2(got[p].data(), want.data() + p * vocab, vocab);
      worst = std::max(worst, err);
      EXPECT_LT(err, kMaxRelErr) << "position " << p;
      EXPECT_EQ(test::argmax(got[p]), want_argmax[p]) << "position " << p;
    }
    std::printf("[ f32      ] tide-demo %s: worst relative L2 error %.3g over %zu positions\n",
                c["name"].get<std::string>().c_str(), worst, prompt.size());
  }
}

TEST(DemoModel, GreedyContinuationsMatchTokenForToken) {
  const nlohmann::json g = test::read_json(golden_dir() / "golden.json");
  const Tokenizer tokenizer = Tokenizer::from_dir(model_dir());
  // Every case with blocks below the 64-token window, two with blocks above it (the suite runs on 2 cores).
  for (int64_t block : {int64_t{16}, int64_t{96}}) {
    Engine engine = make_engine(block);
    const size_t num_cases = block == 16 ? g["generate"].size() : 2;
    for (const auto& c : std::vector<nlohmann::json>(g["generate"].begin(), g["generate"].begin() + num_cases)) {
      SCOPED_TRACE(c["name"].get<std::string>() + ", block size " + std::to_string(block));
      const std::vector<int32_t> prompt = test::ids_of(c["prompt_ids"]), want = test::ids_of(c["greedy_ids"]);
      ASSERT_GE(prompt.size() + want.size(), 200u + 64u);
      GenerateOptions options;
      options.max_tokens = static_cast<int64_t>(want.size());
      options.ignore_eos = true;
      const GenerateResult got = engine.generate(prompt, options);
      EXPECT_EQ(got.ids, want);
      EXPECT_EQ(tokenizer.decode(got.ids, /*skip_special_tokens=*/true), c["text"].get<std::string>());
    }
  }
}

TEST(DemoModel, TextPromptsTokenizeToTheGoldenPromptIds) {
  // The README's prompt reaches the model as the ids transformers was given.
  const nlohmann::json g = test::read_json(golden_dir() / "golden.json");
  const Tokenizer tokenizer = Tokenizer::from_dir(model_dir());
  int checked = 0;
  for (const auto& c : g["generate"]) {
    const std::string name = c["name"], prompt = c["prompt"];
    if (name == "heldout") continue;  // ids cut from a document; its text is only their decoding
    const bool chat = name == "chat";  // the rendered template carries its own <BOS_TOKEN>
    EXPECT_EQ(tokenizer.encode(prompt, /*add_special_tokens=*/!chat), test::ids_of(c["prompt_ids"])) << name;
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

}  // namespace
}  // namespace tide
