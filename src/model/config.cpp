#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/dtype.h"
#include "core/error.h"

namespace tide {
namespace {

using nlohmann::json;

// --- typed field access with errors that name the field ---

class Fields {
 public:
  Fields(const json& j, const std::string& source) : j_(j), source_(source) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  const json& at(const char* key) const {
    if (!has(key)) fail("{}: missing required field '{}'", source_, key);
    return j_.at(key);
  }

  int64_t integer(const char* key) const { return integer_of(at(key), key); }
  int64_t integer(const char* key, int64_t fallback) const { return has(key) ? integer(key) : fallback; }

  int64_t positive(const char* key) const {
    const int64_t v = integer(key);
    if (v <= 0) fail("{}: field '{}' must be positive, got {}", source_, key, v);
    return v;
  }

  // A positive integer at most `max` (the kMaxConfig* bounds of config.h).
  int64_t bounded(const char* key, int64_t max) const {
    const int64_t v = integer(key);
    if (v <= 0 || v > max) fail("{}: field '{}' must be an integer in [1, {}], got {}", source_, key, max, v);
    return v;
  }

  // A finite number in (0, max].
  double positive_number(const char* key, double fallback, double max) const {
    const double v = number(key, fallback);
    if (!(v > 0) || !(v <= max)) fail("{}: field '{}' must be a finite number in (0, {}], got {}", source_, key, max, v);
    return v;
  }

  double number(const char* key) const { return number_of(at(key), key); }
  double number(const char* key, double fallback) const { return has(key) ? number(key) : fallback; }

  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_boolean()) fail("{}: field '{}' must be a boolean", source_, key);
    return j_.at(key).get<bool>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_string()) fail("{}: field '{}' must be a string", source_, key);
    return j_.at(key).get<std::string>();
  }

  int64_t integer_of(const json& v, const std::string& what) const {
    if (!v.is_number_integer()) fail("{}: field '{}' must be an integer, got {}", source_, what, v.dump());
    // Unsigned values beyond int64 would wrap to negative numbers: named as they are written.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      fail("{}: field '{}' is too large: {}", source_, what, v.dump());
    }
    return v.get<int64_t>();
  }

  double number_of(const json& v, const std::string& what) const {
    if (!v.is_number()) fail("{}: field '{}' must be a number", source_, what);
    return v.get<double>();
  }

  const std::string& source() const { return source_; }

 private:
  const json& j_;
  const std::string& source_;
};

int32_t token_id(const Fields& f, const json& v, const std::string& what) {
  const int64_t id = f.integer_of(v, what);
  if (id < 0 || id > INT32_MAX) fail("{}: field '{}' is not a valid token id: {}", f.source(), what, id);
  return static_cast<int32_t>(id);
}

double rope_theta_of(const Fields& f, const json& j) {
  // Newer configs: rope_parameters {rope_type, rope_theta}; older: top-level rope_theta (+ rope_scaling).
  if (f.has("rope_parameters")) {
    const json& rp = j.at("rope_parameters");
    if (!rp.is_object()) fail("{}: field 'rope_parameters' must be an object", f.source());
    Fields rf(rp, f.source());
    const std::string type = rf.string("rope_type", "default");
    if (type != "default") {
      fail("{}: field 'rope_parameters.rope_type' is '{}': rope scaling is not supported", f.source(), type);
    }
    if (rf.has("rope_theta")) return rf.number("rope_theta");
  }
  if (f.has("rope_scaling")) {
    const json& rs = j.at("rope_scaling");
    const bool is_default = rs.is_object() && rs.value("rope_type", rs.value("type", "")) == "default";
    if (!is_default) fail("{}: field 'rope_scaling' is set: rope scaling is not supported", f.source());
  }
  return f.number("rope_theta");
}

// Per-layer sliding flags from layer_types (newer) or sliding_window_pattern (older, default 4).
std::vector<bool> sliding_layers(const Fields& f, const json& j, int64_t num_layers) {
  std::vector<bool> sliding(static_cast<size_t>(num_layers));
  if (f.has("layer_types")) {
    const json& types = j.at("layer_types");
    if (!types.is_array()) fail("{}: field 'layer_types' must be a list", f.source());
    if (static_cast<int64_t>(types.size()) != num_layers) {
      fail("{}: field 'layer_types' has {} entries but num_hidden_layers is {}", f.source(), types.size(),
           num_layers);
    }
    for (size_t i = 0; i < types.size(); ++i) {
      const std::string kind = types[i].is_string() ? types[i].get<std::string>() : "";
      if (kind == "sliding_attention") {
        sliding[i] = true;
      } else if (kind == "full_attention") {
        sliding[i] = false;
      } else {
        fail("{}: field 'layer_types[{}]' must be \"sliding_attention\" or \"full_attention\", got {}",
             f.source(), i, types[i].dump());
      }
    }
    return sliding;
  }
  const int64_t pattern = f.integer("sliding_window_pattern", 4);
  if (pattern <= 0) fail("{}: field 'sliding_window_pattern' must be positive, got {}", f.source(), pattern);
  for (int64_t i = 0; i < num_layers; ++i) sliding[static_cast<size_t>(i)] = (i + 1) % pattern != 0;
  return sliding;
}

// One quantization scheme of compressed-tensors (weights or input_activations of a config group) must be
// 8-bit float with the given strategy and dynamic flag, symmetric.
void check_fp8_scheme(const Fields& f, const json& scheme, const std::string& where, const char* strategy,
                      bool dynamic) {
  if (!scheme.is_object()) fail("{}: field '{}' must be an object", f.source(), where);
  const Fields s(scheme, f.source());
  const std::string type = s.string("type", "");
  const int64_t bits = s.integer("num_bits", 0);
  if (type != "float" || bits != 8) {
    fail("{}: field '{}' describes {}-bit '{}' quantization: tide supports 8-bit float (FP8 E4M3)", f.source(), where,
         bits, type);
  }
  const std::string got = s.string("strategy", "");
  if (got != strategy) {
    fail("{}: field '{}.strategy' is '{}': tide supports '{}' ({})", f.source(), where, got, strategy,
         dynamic ? "a dynamic scale per token" : "one scale per output row");
  }
  if (s.boolean("dynamic", false) != dynamic) {
    fail("{}: field '{}.dynamic' must be {}: tide supports {}", f.source(), where, dynamic ? "true" : "false",
         dynamic ? "dynamic per-token activation scales (no static scales)" : "static weight scales");
  }
  if (!s.boolean("symmetric", true)) fail("{}: field '{}.symmetric' is false: tide supports symmetric FP8", f.source(), where);
}

// config.json's quantization_config: absent (the checkpoint's own dtype, or FP8 quantized at load) or
// compressed-tensors FP8 as `tide quantize` writes it and vLLM reads it (rowwise E4M3 weights, dynamic
// per-token activations). Anything else is refused by name rather than loaded with the wrong numerics.
Quantization quantization_of(const Fields& f, const json& j) {
  if (!f.has("quantization_config")) return Quantization::kNone;
  const json& q = j.at("quantization_config");
  if (!q.is_object()) fail("{}: field 'quantization_config' must be an object", f.source());
  const Fields qf(q, f.source());
  const std::string method = qf.string("quant_method", "");
  if (method != "compressed-tensors") {
    fail("{}: field 'quantization_config.quant_method' is '{}': tide loads compressed-tensors FP8 checkpoints "
         "(rowwise E4M3 weights, as `tide quantize` writes) or quantizes a bf16 checkpoint to FP8 at load",
         f.source(), method);
  }
  const std::string format = qf.string("format", "float-quantized");
  if (format != "float-quantized") {
    fail("{}: field 'quantization_config.format' is '{}': tide supports 'float-quantized' (FP8)", f.source(), format);
  }
  if (qf.has("kv_cache_scheme")) {
    fail("{}: field 'quantization_config.kv_cache_scheme' is set: quantized KV cache scales are not supported",
         f.source());
  }
  if (!qf.has("config_groups") || !q.at("config_groups").is_object() || q.at("config_groups").empty()) {
    fail("{}: field 'quantization_config.config_groups' must be a non-empty object", f.source());
  }
  for (const auto& [name, group] : q.at("config_groups").items()) {
    const std::string where = "quantization_config.config_groups." + name;
    if (!group.is_object()) fail("{}: field '{}' must be an object", f.source(), where);
    const Fields g(group, f.source());
    check_fp8_scheme(f, g.at("weights"), where + ".weights", "channel", false);
    // Weight-only FP8 checkpoints (no input_activations) run with tide's dynamic per-token activations.
    if (g.has("input_activations")) {
      check_fp8_scheme(f, group.at("input_activations"), where + ".input_activations", "token", true);
    }
  }
  return Quantization::kFp8;
}

// Layers that share a window, in groups of at most P layers, so that one block of any group has the same
// bytes and every group draws from one KV arena (docs/design/kv-cache.md). P divides every window's layer count
// when that keeps the groups few (Command-A: 48 sliding + 16 global layers -> 3 + 1 groups of 16); otherwise
// the P with the fewest padding slots among those that do.
void build_groups(ModelConfig& c) {
  constexpr int64_t kMaxGroups = 8;
  std::vector<int64_t> windows;  // in order of first appearance
  std::map<int64_t, std::vector<int>> layers_of_window;
  for (int i = 0; i < static_cast<int>(c.layers.size()); ++i) {
    const int64_t w = c.layers[static_cast<size_t>(i)].window;
    if (!layers_of_window.count(w)) windows.push_back(w);
    layers_of_window[w].push_back(i);
  }
  auto num_groups = [&](int64_t p) {
    int64_t n = 0;
    for (const auto& [w, layers] : layers_of_window) n += (static_cast<int64_t>(layers.size()) + p - 1) / p;
    return n;
  };
  int64_t p = 0, most = 0;
  for (const auto& [w, layers] : layers_of_window) {
    p = std::gcd(p, static_cast<int64_t>(layers.size()));
    most = std::max(most, static_cast<int64_t>(layers.size()));
  }
  if (num_groups(p) > kMaxGroups) {
    int64_t best_waste = INT64_MAX;
    for (int64_t q = 1; q <= most; ++q) {
      const int64_t waste = num_groups(q) * q - c.num_layers;
      if (num_groups(q) <= kMaxGroups && waste <= best_waste) {
        best_waste = waste;
        p = q;
      }
    }
  }
  c.layers_per_kv_block = p;
  for (int64_t w : windows) {
    const std::vector<int>& layers = layers_of_window.at(w);
    for (size_t i = 0; i < layers.size(); ++i) {
      if (i % static_cast<size_t>(p) == 0) c.groups.push_back(LayerGroup{w, {}});
      LayerGroup& group = c.groups.back();
      LayerSpec& layer = c.layers[static_cast<size_t>(layers[i])];
      layer.group_idx = static_cast<int>(c.groups.size()) - 1;
      layer.layer_idx_in_group = group.num_layers();
      group.layers.push_back(layers[i]);
    }
  }
}

}  // namespace

ModelConfig ModelConfig::from_json(const json& j, const std::string& source) {
  if (!j.is_object()) fail("{}: config must be a JSON object", source);
  const Fields f(j, source);
  ModelConfig c;

  const json& archs = f.at("architectures");
  if (!archs.is_array() || archs.empty() || !archs[0].is_string()) {
    fail("{}: field 'architectures' must be a non-empty list of strings", source);
  }
  c.architecture = archs[0].get<std::string>();
  if (c.architecture != "Cohere2ForCausalLM") {
    fail("{}: field 'architectures' names '{}': tide supports Cohere2ForCausalLM", source, c.architecture);
  }
  const std::string act = f.string("hidden_act", "silu");
  if (act != "silu") fail("{}: field 'hidden_act' is '{}': only 'silu' is supported", source, act);
  if (f.boolean("attention_bias", false)) fail("{}: field 'attention_bias' is true: biases are not supported", source);

  // Sizes bounded first: every later product of them (shapes, byte counts, positions) stays in range.
  c.vocab_size = f.bounded("vocab_size", kMaxConfigVocabSize);
  c.hidden_size = f.bounded("hidden_size", kMaxConfigHiddenSize);
  c.intermediate_size = f.bounded("intermediate_size", kMaxConfigIntermediateSize);
  c.num_layers = f.bounded("num_hidden_layers", kMaxConfigLayers);
  c.num_heads = f.bounded("num_attention_heads", kMaxConfigHeads);
  c.num_heads_kv = f.has("num_key_value_heads") ? f.bounded("num_key_value_heads", kMaxConfigHeads) : c.num_heads;
  c.max_position_embeddings = f.bounded("max_position_embeddings", kMaxConfigPositions);
  c.layer_norm_eps = f.number("layer_norm_eps");
  c.logit_scale = f.positive_number("logit_scale", 1.0, kMaxConfigLogitScale);
  c.rope_theta = rope_theta_of(f, j);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", true);
  c.dtype = f.string("dtype", f.string("torch_dtype", ""));
  c.quantization = quantization_of(f, j);

  if (c.hidden_size % c.num_heads != 0) {
    fail("{}: field 'hidden_size' ({}) is not divisible by 'num_attention_heads' ({})", source, c.hidden_size,
         c.num_heads);
  }
  c.head_dim = c.hidden_size / c.num_heads;
  if (c.head_dim % 2 != 0) fail("{}: head_dim {} (hidden_size / num_attention_heads) must be even", source, c.head_dim);
  if (c.num_heads % c.num_heads_kv != 0) {
    fail("{}: field 'num_attention_heads' ({}) is not divisible by 'num_key_value_heads' ({})", source,
         c.num_heads, c.num_heads_kv);
  }
  if (!(c.layer_norm_eps > 0 && c.layer_norm_eps <= 1)) {
    fail("{}: field 'layer_norm_eps' must be a finite number in (0, 1], got {}", source, c.layer_norm_eps);
  }
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) {
    fail("{}: field 'rope_theta' must be a finite positive number, got {}", source, c.rope_theta);
  }

  if (f.has("bos_token_id")) c.bos_token_id = token_id(f, j.at("bos_token_id"), "bos_token_id");
  if (f.has("pad_token_id")) c.pad_token_id = token_id(f, j.at("pad_token_id"), "pad_token_id");
  if (f.has("eos_token_id")) {
    const json& eos = j.at("eos_token_id");
    if (eos.is_array()) {
      for (size_t i = 0; i < eos.size(); ++i) c.eos_token_ids.push_back(token_id(f, eos[i], "eos_token_id"));
    } else {
      c.eos_token_ids.push_back(token_id(f, eos, "eos_token_id"));
    }
  }

  // Special tokens the engine stops on or puts in prompts must be rows of the embedding.
  auto check_in_vocab = [&](int32_t id, const char* what) {
    if (id >= c.vocab_size) fail("{}: field '{}' is {}, outside the vocabulary (vocab_size {})", source, what, id, c.vocab_size);
  };
  if (c.bos_token_id) check_in_vocab(*c.bos_token_id, "bos_token_id");
  for (int32_t id : c.eos_token_ids) check_in_vocab(id, "eos_token_id");

  const std::vector<bool> sliding = sliding_layers(f, j, c.num_layers);
  const bool any_sliding = std::find(sliding.begin(), sliding.end(), true) != sliding.end();
  const int64_t window = any_sliding ? f.bounded("sliding_window", kMaxConfigPositions) : 0;
  for (bool s : sliding) c.layers.push_back(LayerSpec{s ? window : kGlobalWindow, s, 0, 0});
  build_groups(c);
  return c;
}

std::vector<float> ModelConfig::rope_inv_freq() const {
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
  for (size_t j = 0; j < inv_freq.size(); ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(head_dim);
    float f = 1.0f / std::pow(static_cast<float>(rope_theta), exponent);
    if (dtype == "bfloat16") f = bf16_to_f32(f32_to_bf16(f));
    if (dtype == "float16") f = f16_to_f32(f32_to_f16(f));
    inv_freq[j] = f;
  }
  return inv_freq;
}

ModelConfig ModelConfig::from_dir(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "config.json";
  std::ifstream in(path);
  if (!in) fail("cannot open {}", path.string());
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("{}: not valid JSON", path.string());
  return from_json(j, path.string());
}

}  // namespace tide
