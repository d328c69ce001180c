// ModelConfig from config.json: both spellings of layer kinds and rope theta, groups, and errors that
// name the field.
#include <gtest/gtest.h>

#include <cmath>

#include "../test_util.h"
#include "model/config.h"

namespace tide {
namespace {

nlohmann::json tiny_config() { return test::read_json(test::fixture("cohere2-tiny/config.json")); }

std::string error_of(const nlohmann::json& j) {
  try {
    ModelConfig::from_json(j, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, HubSpellingGivesEveryFourthLayerGlobal) {
  const ModelConfig c = ModelConfig::from_json(tiny_config(), "config.json");
  ASSERT_EQ(c.layers.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const bool global = i == 3 || i == 7;
    EXPECT_EQ(c.layers[i].is_global(), global) << i;
    EXPECT_EQ(c.layers[i].rope, !global) << i;
    EXPECT_EQ(c.layers[i].window, global ? 0 : 16) << i;
  }
  // 6 sliding and 2 global layers: groups of 2, so that every group's KV block has the same size.
  EXPECT_EQ(c.layers_per_kv_block, 2);
  ASSERT_EQ(c.groups.size(), 4u);
  EXPECT_EQ(c.groups[0].window, 16);
  EXPECT_EQ(c.groups[0].layers, (std::vector<int>{0, 1}));
  EXPECT_EQ(c.groups[1].layers, (std::vector<int>{2, 4}));
  EXPECT_EQ(c.groups[2].layers, (std::vector<int>{5, 6}));
  EXPECT_EQ(c.groups[2].window, 16);
  EXPECT_TRUE(c.groups[3].is_global());
  EXPECT_EQ(c.groups[3].layers, (std::vector<int>{3, 7}));
  EXPECT_EQ(c.layers[4].group_idx, 1);
  EXPECT_EQ(c.layers[4].layer_idx_in_group, 1);
  EXPECT_EQ(c.layers[7].group_idx, 3);
  EXPECT_EQ(c.layers[7].layer_idx_in_group, 1);
  EXPECT_EQ(c.group_windows(), (std::vector<int64_t>{16, 16, 16, 0}));
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.rope_theta, 50000.0);
  EXPECT_EQ(c.logit_scale, 0.25);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{6});
}

TEST(ModelConfig, BothSpellingsGiveTheSameLayers) {
  nlohmann::json old_style = tiny_config();
  nlohmann::json new_style = old_style;
  new_style.erase("sliding_window_pattern");
  new_style.erase("rope_theta");
  new_style["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 50000.0}};
  new_style["layer_types"] = nlohmann::json::array();
  for (int i = 0; i < 8; ++i) new_style["layer_types"].push_back(i % 4 == 3 ? "full_attention" : "sliding_attention");
  const ModelConfig a = ModelConfig::from_json(old_style, "old");
  const ModelConfig b = ModelConfig::from_json(new_style, "new");
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t i = 0; i < a.layers.size(); ++i) {
    EXPECT_EQ(a.layers[i].window, b.layers[i].window);
    EXPECT_EQ(a.layers[i].rope, b.layers[i].rope);
    EXPECT_EQ(a.layers[i].group_idx, b.layers[i].group_idx);
  }
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  // And the fixture written in the new spelling parses to its S S S G.
  const ModelConfig hd128 = ModelConfig::from_dir(test::fixture("cohere2-tiny-hd128"));
  EXPECT_EQ(hd128.head_dim, 128);
  EXPECT_EQ(hd128.groups.size(), 4u);  // 3 sliding layers and 1 global: a layer per group
  EXPECT_EQ(hd128.layers_per_kv_block, 1);
  EXPECT_TRUE(hd128.layers[3].is_global());
  EXPECT_EQ(hd128.layers[0].window, 32);
}

TEST(ModelConfig, GlobalFirstLayerAndAllGlobal) {
  nlohmann::json j = tiny_config();
  j["sliding_window_pattern"] = 1;  // (i + 1) % 1 == 0 for every layer: all global
  const ModelConfig all_global = ModelConfig::from_json(j, "c");
  EXPECT_EQ(all_global.groups.size(), 1u);
  EXPECT_TRUE(all_global.groups[0].is_global());
  j.erase("sliding_window");  // not needed without sliding layers
  EXPECT_NO_THROW(ModelConfig::from_json(j, "c"));

  j = tiny_config();
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention"};
  const ModelConfig c = ModelConfig::from_json(j, "c");
  EXPECT_TRUE(c.groups[0].is_global());
  EXPECT_EQ(c.groups[1].layers, (std::vector<int>{1}));
  EXPECT_EQ(c.groups[2].layers, (std::vector<int>{2}));
}

TEST(ModelConfig, LayerGroupsOfOneBlockSize) {
  nlohmann::json j = tiny_config();
  auto groups_of = [&](int64_t layers, int64_t pattern) {
    j["num_hidden_layers"] = layers;
    j["sliding_window_pattern"] = pattern;
    return ModelConfig::from_json(j, "c");
  };
  // Command R7B's pattern (24 sliding + 8 global layers) and Command-A's (48 + 16): 3 sliding groups and a
  // global one, each of a quarter of the layers.
  ModelConfig c = groups_of(32, 4);
  EXPECT_EQ(c.layers_per_kv_block, 8);
  EXPECT_EQ(c.group_windows(), (std::vector<int64_t>{16, 16, 16, 0}));
  c = groups_of(64, 4);
  EXPECT_EQ(c.layers_per_kv_block, 16);
  EXPECT_EQ(c.groups.size(), 4u);
  // 22 sliding + 4 global layers: a common divisor (2) would give 13 groups, so 4 with 2 slots unused.
  c = groups_of(26, 6);
  EXPECT_EQ(c.layers_per_kv_block, 4);
  ASSERT_EQ(c.groups.size(), 7u);
  EXPECT_EQ(c.groups[5].layers.size(), 2u);
  for (const LayerSpec& l : c.layers) {
    EXPECT_LT(l.layer_idx_in_group, c.layers_per_kv_block);
    EXPECT_EQ(c.groups[static_cast<size_t>(l.group_idx)].window, l.window);
  }
}

TEST(ModelConfig, HeadDimComesFromHiddenSizeLikeTransformers) {
  nlohmann::json j = tiny_config();
  j["head_dim"] = 64;  // ignored by transformers' Cohere2
  EXPECT_EQ(ModelConfig::from_json(j, "c").head_dim, 32);
}

TEST(ModelConfig, RopeFrequenciesFollowTheCheckpointDtypeLikeTransformers) {
  nlohmann::json j = tiny_config();  // "dtype": "bfloat16"
  const std::vector<float> bf16 = ModelConfig::from_json(j, "c").rope_inv_freq();
  j["dtype"] = "float32";
  const std::vector<float> f32 = ModelConfig::from_json(j, "c").rope_inv_freq();
  ASSERT_EQ(bf16.size(), 16u);
  ASSERT_EQ(f32.size(), 16u);
  for (size_t i = 0; i < f32.size(); ++i) {
    const double exact = std::pow(50000.0, -2.0 * double(i) / 32.0);
    EXPECT_NEAR(f32[i], exact, 1e-6 * exact) << i;
    EXPECT_EQ(bf16[i], bf16_to_f32(f32_to_bf16(f32[i]))) << i;
  }
  EXPECT_NE(bf16[1], f32[1]);  // 50000^(-1/16) is not a bf16 value
  j.erase("dtype");
  j["torch_dtype"] = "bfloat16";  // the older spelling
  EXPECT_EQ(ModelConfig::from_json(j, "c").rope_inv_freq(), bf16);
}

TEST(ModelConfig, ErrorsNameTheField) {
  nlohmann::json j = tiny_config();
  j["architectures"] = {"LlamaForCausalLM"};
  EXPECT_NE(error_of(j).find("architectures"), std::string::npos) << error_of(j);

  for (const char* field : {"hidden_size", "num_attention_heads", "vocab_size", "intermediate_size",
                            "num_hidden_layers", "layer_norm_eps", "rope_theta", "sliding_window",
                            "max_position_embeddings"}) {
    j = tiny_config();
    j.erase(field);
    EXPECT_NE(error_of(j).find(field), std::string::npos) << field << ": " << error_of(j);
  }

  j = tiny_config();
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  EXPECT_NE(error_of(j).find("rope_scaling"), std::string::npos);

  j = tiny_config();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1e4}};
  EXPECT_NE(error_of(j).find("rope_type"), std::string::npos);

  j = tiny_config();
  j["hidden_size"] = "256";
  EXPECT_NE(error_of(j).find("hidden_size"), std::string::npos);

  j = tiny_config();
  j["num_key_value_heads"] = 3;
  EXPECT_NE(error_of(j).find("num_key_value_heads"), std::string::npos);

  j = tiny_config();
  j["layer_types"] = {"sliding_attention"};
  EXPECT_NE(error_of(j).find("layer_types"), std::string::npos);

  j = tiny_config();
  j["layer_types"] = nlohmann::json::array();
  for (int i = 0; i < 8; ++i) j["layer_types"].push_back("chunked_attention");
  EXPECT_NE(error_of(j).find("layer_types[0]"), std::string::npos);

  j = tiny_config();
  j["sliding_window"] = 0;
  EXPECT_NE(error_of(j).find("sliding_window"), std::string::npos);

  EXPECT_NE(error_of(nlohmann::json::array()).find("object"), std::string::npos);
}

// compressed-tensors FP8 (rowwise weights, dynamic per-token activations) is read; every other scheme is
// refused with an error naming the field, never loaded with the wrong numerics.
TEST(ModelConfig, QuantizationConfig) {
  nlohmann::json j = tiny_config();
  EXPECT_EQ(ModelConfig::from_json(j, "c").quantization, Quantization::kNone);
  const nlohmann::json weights = {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}, {"symmetric", true},
                                  {"dynamic", false}};
  const nlohmann::json activations = {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"symmetric", true},
                                      {"dynamic", true}};
  const nlohmann::json fp8 = {{"quant_method", "compressed-tensors"},
                              {"format", "float-quantized"},
                              {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", weights},
                                                              {"input_activations", activations}}}}},
                              {"ignore", {"lm_head"}},
                              {"kv_cache_scheme", nullptr}};
  j["quantization_config"] = fp8;
  EXPECT_EQ(ModelConfig::from_json(j, "c").quantization, Quantization::kFp8);
  j["quantization_config"]["config_groups"]["group_0"].erase("input_activations");  // weight-only FP8
  EXPECT_EQ(ModelConfig::from_json(j, "c").quantization, Quantization::kFp8);

  struct Refused {
    std::string path;  // JSON pointer into quantization_config
    nlohmann::json value;
    std::string named;
  };
  const std::vector<Refused> refused = {
      {"/quant_method", "gptq", "quant_method"},
      {"/quant_method", "fp8", "quant_method"},
      {"/quant_method", "awq", "awq"},
      {"/format", "pack-quantized", "format"},
      {"/kv_cache_scheme", {{"num_bits", 8}, {"type", "float"}}, "kv_cache_scheme"},
      {"/config_groups", nlohmann::json::object(), "config_groups"},
      {"/config_groups/group_0/weights/num_bits", 4, "group_0.weights"},
      {"/config_groups/group_0/weights/type", "int", "group_0.weights"},
      {"/config_groups/group_0/weights/strategy", "block", "weights.strategy"},
      {"/config_groups/group_0/weights/strategy", "tensor", "weights.strategy"},
      {"/config_groups/group_0/weights/symmetric", false, "symmetric"},
      {"/config_groups/group_0/input_activations/strategy", "tensor", "input_activations.strategy"},
      {"/config_groups/group_0/input_activations/dynamic", false, "input_activations.dynamic"},
      {"/config_groups/group_0/weights", "fp8", "group_0.weights"},
  };
  for (const Refused& r : refused) {
    j = tiny_config();
    j["quantization_config"] = fp8;
    j["quantization_config"][nlohmann::json::json_pointer(r.path)] = r.value;
    const std::string error = error_of(j);
    EXPECT_NE(error.find(r.named), std::string::npos) << r.path << ": " << error;
  }
  j = tiny_config();
  j["quantization_config"] = "fp8";
  EXPECT_NE(error_of(j).find("quantization_config"), std::string::npos);
}

}  // namespace
}  // namespace tide

namespace tide {
namespace {

// bench/models holds the real configs of Command R7B and Command A, for --load-format dummy: they parse to the
// shapes of docs/design/cohere2-numerics.md ("Real model shapes").
TEST(ModelConfig, RealModelConfigsOfBenchModels) {
  struct Want {
    const char* dir;
    int64_t hidden, layers, heads, intermediate, max_positions;
  };
  for (const Want& w : {Want{"command-r7b-12-2024", 4096, 32, 32, 14336, 8192},
                        Want{"command-a-03-2025", 12288, 64, 96, 36864, 262144}}) {
    const ModelConfig c = ModelConfig::from_dir(test::fixture("../../bench/models") / w.dir);
    EXPECT_EQ(c.hidden_size, w.hidden) << w.dir;
    EXPECT_EQ(c.num_layers, w.layers) << w.dir;
    EXPECT_EQ(c.num_heads, w.heads) << w.dir;
    EXPECT_EQ(c.num_heads_kv, 8) << w.dir;
    EXPECT_EQ(c.head_dim, 128) << w.dir;
    EXPECT_EQ(c.intermediate_size, w.intermediate) << w.dir;
    EXPECT_EQ(c.vocab_size, 256000) << w.dir;
    EXPECT_EQ(c.max_position_embeddings, w.max_positions) << w.dir;
    EXPECT_TRUE(c.tie_word_embeddings) << w.dir;
    EXPECT_EQ(c.logit_scale, 0.25) << w.dir;
    EXPECT_EQ(c.rope_theta, 50000.0) << w.dir;
    EXPECT_EQ(c.quantization, Quantization::kNone) << w.dir;
    // Three sliding groups (window 4096) and one global group, each of a quarter of the layers.
    EXPECT_EQ(c.layers_per_kv_block, w.layers / 4) << w.dir;
    ASSERT_EQ(c.groups.size(), 4u) << w.dir;
    for (int g = 0; g < 3; ++g) EXPECT_EQ(c.groups[static_cast<size_t>(g)].window, 4096) << w.dir;
    EXPECT_EQ(c.groups[0].num_layers(), w.layers / 4) << w.dir;
    EXPECT_TRUE(c.groups[3].is_global()) << w.dir;
    EXPECT_EQ(c.groups[3].layers.front(), 3) << w.dir;
  }
}

}  // namespace
}  // namespace tide

namespace tide {
namespace {

// Sizes are bounded before any arithmetic uses them, numbers must be finite and of sane magnitude, and the
// special token ids must lie in the vocabulary: each refusal names the field and, for a bound, the bound.
TEST(ModelConfig, SizesAndNumbersOutOfRangeAreRefusedNamingTheBound) {
  struct Case {
    const char* field;
    nlohmann::json value;
    std::string needle;  // besides the field's name
  };
  const int64_t big = INT64_MAX;
  const std::vector<Case> cases = {
      {"num_hidden_layers", int64_t{1} << 40, "[1, 1024]"},
      {"num_hidden_layers", 0, "[1, 1024]"},
      {"num_hidden_layers", -8, "[1, 1024]"},
      {"hidden_size", int64_t{1} << 20, "[1, 131072]"},
      {"intermediate_size", big, "[1, 1048576]"},
      {"num_attention_heads", 4096, "[1, 1024]"},
      {"num_key_value_heads", 2048, "[1, 1024]"},
      {"vocab_size", int64_t{1} << 31, "[1, 4194304]"},
      {"max_position_embeddings", big, "[1, 16777216]"},
      {"sliding_window", big, "[1, 16777216]"},
      {"max_position_embeddings", 18446744073709551615ull, "too large"},
      {"max_position_embeddings", 1e30, "integer"},
      {"logit_scale", 1e300, "(0, 1000]"},
      {"logit_scale", 0.0, "(0, 1000]"},
      {"logit_scale", -0.25, "(0, 1000]"},
      {"logit_scale", "0.25", "number"},
      {"layer_norm_eps", 2.0, "(0, 1]"},
      {"layer_norm_eps", -1e-5, "(0, 1]"},
      {"rope_theta", 0.0, "positive"},
      {"eos_token_id", 5000, "vocab_size 1024"},
      {"eos_token_id", nlohmann::json::array({6, 1024}), "vocab_size 1024"},
      {"bos_token_id", 1024, "vocab_size 1024"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = tiny_config();
    j[c.field] = c.value;
    const std::string error = error_of(j);
    EXPECT_NE(error.find(std::string("'") + c.field + "'"), std::string::npos) << c.field << "=" << c.value << ": " << error;
    EXPECT_NE(error.find(c.needle), std::string::npos) << c.field << "=" << c.value << ": " << error;
    EXPECT_EQ(error.rfind("config.json: ", 0), 0u) << error;  // the file first
  }
  // rope_theta written as an overflowing literal parses as infinity: refused as not finite.
  nlohmann::json inf = nlohmann::json::parse(R"({"rope_theta": 1e400})", nullptr, false);
  if (!inf.is_discarded()) {
    nlohmann::json j = tiny_config();
    j["rope_theta"] = inf["rope_theta"];
    EXPECT_NE(error_of(j).find("rope_theta"), std::string::npos) << error_of(j);
  }
}

TEST(ModelConfig, TheBoundsThemselvesAreAccepted) {
  nlohmann::json j = tiny_config();
  j["max_position_embeddings"] = kMaxConfigPositions;
  j["sliding_window"] = kMaxConfigPositions;
  j["logit_scale"] = kMaxConfigLogitScale;
  const ModelConfig c = ModelConfig::from_json(j, "config.json");
  EXPECT_EQ(c.max_position_embeddings, kMaxConfigPositions);
  EXPECT_EQ(c.layers[0].window, kMaxConfigPositions);
  EXPECT_EQ(c.logit_scale, kMaxConfigLogitScale);
  // The largest of every size at once: products the engine forms stay far from int64's range.
  j["num_hidden_layers"] = kMaxConfigLayers;
  j["hidden_size"] = kMaxConfigHiddenSize;
  j["intermediate_size"] = kMaxConfigIntermediateSize;
  j["num_attention_heads"] = kMaxConfigHeads;
  j["num_key_value_heads"] = kMaxConfigHeads;
  j["vocab_size"] = kMaxConfigVocabSize;
  const ModelConfig most = ModelConfig::from_json(j, "config.json");
  EXPECT_EQ(most.num_layers, kMaxConfigLayers);
  EXPECT_LT(static_cast<double>(most.num_layers) * 3 * most.intermediate_size * most.hidden_size * 4, 0x1p62);
}

}  // namespace
}  // namespace tide
