// ModelConfig: what tide needs from a Hugging Face config.json, validated. Each layer carries its own
// attention kind (window or global, RoPE or none); layers that share a window form LayerGroups of at most
// layers_per_kv_block layers each: the unit the KV cache keeps block tables by. Every group's KV block then
// has the same byte size, so all groups draw blocks from one arena. Non-goals: architectures other than Cohere2ForCausalLM (for now).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tide {

inline constexpr int64_t kGlobalWindow = 0;  // LayerSpec::window / LayerGroup::window of a global layer

// Upper bounds of config.json's sizes, generous for any real model (the largest have about 128 layers,
// hidden sizes near 16k, vocabularies near 256k and context lengths near 10M) and small enough that every
// product the engine forms from them (weight and KV byte counts, positions in int32) fits in int64 / int32
// without overflow. ModelConfig::from_json refuses values beyond them, naming the bound.
inline constexpr int64_t kMaxConfigLayers = 1024;                 // num_hidden_layers
inline constexpr int64_t kMaxConfigHiddenSize = int64_t{1} << 17;  // hidden_size: 131072
inline constexpr int64_t kMaxConfigIntermediateSize = int64_t{1} << 20;  // intermediate_size: 1048576
inline constexpr int64_t kMaxConfigHeads = 1024;                   // num_attention_heads, num_key_value_heads
inline constexpr int64_t kMaxConfigVocabSize = int64_t{1} << 22;   // vocab_size: 4194304, the tokenizer's id bound
inline constexpr int64_t kMaxConfigPositions = int64_t{1} << 24;   // max_position_embeddings, sliding_window: 16777216
inline constexpr double kMaxConfigLogitScale = 1000.0;             // logit_scale in (0, 1000]

struct LayerSpec {
  int64_t window = kGlobalWindow;  // keys p-window+1 .. p are attended; kGlobalWindow: keys 0 .. p
  bool rope = false;               // rotary embedding on q and k (Cohere2: sliding layers only)
  int group_idx = 0;               // index into ModelConfig::groups
  int layer_idx_in_group = 0;      // this layer's slot inside its group's KV blocks (< layers_per_kv_block)

  bool is_global() const { return window == kGlobalWindow; }
};

// How the linear layers' weights are stored or quantized at load: as the checkpoint is, or FP8 E4M3 (rowwise
// weight scales, dynamic per-token activation scales; core/fp8.h).
enum class Quantization { kNone, kFp8 };

struct LayerGroup {
  int64_t window = kGlobalWindow;
  std::vector<int> layers;  // model layer indices, ascending

  bool is_global() const { return window == kGlobalWindow; }
  int num_layers() const { return static_cast<int>(layers.size()); }
};

struct ModelConfig {
  std::string architecture;  // "Cohere2ForCausalLM"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_heads_kv = 0;
  int64_t head_dim = 0;  // hidden_size / num_heads (transformers ignores config.json's head_dim)
  int64_t max_position_embeddings = 0;
  double layer_norm_eps = 1e-5;
  double logit_scale = 1.0;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = true;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // config.json's eos_token_id (an int or a list)
  std::optional<int32_t> pad_token_id;
  // config.json "dtype" (or older "torch_dtype"): the dtype transformers instantiates the model in. It also
  // decides the precision of transformers' RoPE inv_freq buffer (see rope_inv_freq()). Empty when absent.
  std::string dtype;
  // kFp8 for a compressed-tensors FP8 checkpoint (quantization_config: rowwise E4M3 weights, dynamic per-token
  // activations), else kNone. Other quantization configs are refused by from_json.
  Quantization quantization = Quantization::kNone;

  std::vector<LayerSpec> layers;   // [num_layers]
  // Layers sharing a window, by window in order of first appearance, then by layer, at most
  // layers_per_kv_block per group (R7B: 24 sliding + 8 global layers -> 3 sliding groups and 1 global, of 8).
  std::vector<LayerGroup> groups;
  // Layer slots of one KV block of any group: it divides every window's layer count when that gives at most
  // 8 groups; otherwise the last group of a window may leave slots unused.
  int64_t layers_per_kv_block = 0;

  // Parses and validates a config.json object. `source` names the file in error messages.
  // Throws tide::Error naming the field for unknown architectures, unsupported features (rope scaling,
  // biases, activations), missing or mistyped fields, inconsistent sizes, sizes beyond the kMaxConfig* bounds,
  // non-finite or out-of-range numbers (logit_scale, layer_norm_eps, rope_theta) and special token ids
  // (bos, eos) outside the vocabulary.
  static ModelConfig from_json(const nlohmann::json& json, const std::string& source);
  // Reads DIR/config.json.
  static ModelConfig from_dir(const std::filesystem::path& dir);

  // RoPE inverse frequencies [head_dim / 2]: 1 / theta^(2j / head_dim) computed in f32 as transformers
  // does, then rounded to `dtype` when that is bfloat16 or float16: transformers keeps inv_freq as a model
  // buffer, so loading a bf16 checkpoint casts it to bf16, and the reference outputs of such checkpoints
  // (and the models' own training code) use the rounded frequencies.
  std::vector<float> rope_inv_freq() const;

  // Each group's window, in groups order (the KV cache manager's layout).
  std::vector<int64_t> group_windows() const {
    std::vector<int64_t> windows;
    for (const LayerGroup& g : groups) windows.push_back(g.window);
    return windows;
  }

  int64_t q_size() const { return num_heads * head_dim; }
  int64_t kv_size() const { return num_heads_kv * head_dim; }
  int64_t qkv_size() const { return q_size() + 2 * kv_size(); }
};

}  // namespace tide
