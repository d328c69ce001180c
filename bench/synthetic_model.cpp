#include "bench/synthetic_model.h"

#include <cmath>
#include <fstream>

#include "backend/cuda/cuda_check.h"
#include "bench/bench_util.h"
#include "core/error.h"

namespace tide::bench {
namespace {

using nlohmann::json;

// The real models' shapes (bench/models holds their config.json). Command-A differs from R7B in width, depth
// and context only.
json r7b_config() {
  return json{{"architectures", {"Cohere2ForCausalLM"}},
              {"model_type", "cohere2"},
              {"vocab_size", 256000},
              {"hidden_size", 4096},
              {"intermediate_size", 14336},
              {"num_hidden_layers", 32},
              {"num_attention_heads", 32},
              {"num_key_value_heads", 8},
              {"max_position_embeddings", 131072},
              {"sliding_window", 4096},
              {"sliding_window_pattern", 4},
              {"rope_theta", 50000.0},
              {"logit_scale", 0.25},
              {"layer_norm_eps", 1e-5},
              {"hidden_act", "silu"},
              {"attention_bias", false},
              {"tie_word_embeddings", true},
              {"bos_token_id", 5},
              {"eos_token_id", 255001},
              {"pad_token_id", 0}};
}

json command_a_config() {
  json j = r7b_config();
  j["hidden_size"] = 12288;
  j["num_hidden_layers"] = 64;
  j["num_attention_heads"] = 96;
  j["intermediate_size"] = 36864;
  j["max_position_embeddings"] = 262144;
  return j;
}

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("--synthetic: cannot open {} (expected r7b, command-a or a config.json path)", path);
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) fail("--synthetic: {} is not a JSON object", path);
  return j;
}

}  // namespace

json synthetic_config_json(const std::string& spec, std::optional<int64_t> num_layers) {
  json j = spec == "r7b" ? r7b_config() : spec == "command-a" ? command_a_config() : read_json_file(spec);
  if (num_layers) {
    if (*num_layers <= 0) fail("--num-layers must be positive, got {}", *num_layers);
    j["num_hidden_layers"] = *num_layers;
    if (j.contains("layer_types") && j["layer_types"].is_array()) {
      json& types = j["layer_types"];
      if (static_cast<int64_t>(types.size()) < *num_layers) {
        fail("--num-layers {}: the config's layer_types has only {} entries", *num_layers, types.size());
      }
      types.erase(types.begin() + static_cast<std::ptrdiff_t>(*num_layers), types.end());
    }
  }
  j["dtype"] = "bfloat16";
  j.erase("torch_dtype");
  return j;
}

int64_t linear_params(const ModelConfig& c) {
  const int64_t per_layer = c.qkv_size() * c.hidden_size + c.hidden_size * c.q_size() +
                            2 * c.intermediate_size * c.hidden_size + c.hidden_size * c.intermediate_size;
  return per_layer * c.num_layers;
}

int64_t weight_bytes(const ModelConfig& c, bool fp8) {
  const int64_t norms = (c.num_layers + 1) * c.hidden_size;
  const int64_t embed = c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2);
  const int64_t rows = (c.qkv_size() + c.hidden_size + 2 * c.intermediate_size + c.hidden_size) * c.num_layers;
  const int64_t linear = fp8 ? linear_params(c) + 4 * rows : 2 * linear_params(c);
  return linear + 2 * (norms + embed);
}

Cohere2Weights synthetic_weights(const ModelConfig& c, CudaBackend& backend, bool fp8) {
  const cudaStream_t stream = backend.stream();
  auto linear = [&](int64_t rows, int64_t fan_in) {
    Tensor t = backend.alloc(DType::kBF16, Shape{rows, fan_in});
    fill_random(backend, t, 0.0f, 1.0f / std::sqrt(static_cast<float>(fan_in)));
    if (!fp8) return Linear{t, Tensor{}};
    Linear l{backend.alloc(DType::kF8E4M3, Shape{rows, fan_in}), backend.alloc(DType::kF32, Shape{rows})};
    backend.quantize_fp8(l.weight, l.scale, t);  // per-token quantization of rows = rowwise weight scales
    return l;
  };
  auto norm = [&]() {
    Tensor t = backend.alloc(DType::kBF16, Shape{c.hidden_size});
    fill_random(backend, t, 1.0f, 0.1f);
    return t;
  };

  Cohere2Weights w;
  // Scaled up from 1/sqrt(H) so that the embedding rows are not negligible next to the layers' outputs.
  w.embed = backend.alloc(DType::kBF16, Shape{c.vocab_size, c.hidden_size});
  fill_random(backend, w.embed, 0.0f, 4.0f / std::sqrt(static_cast<float>(c.hidden_size)));
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    w.lm_head = backend.alloc(DType::kBF16, Shape{c.vocab_size, c.hidden_size});
    fill_random(backend, w.lm_head, 0.0f, 1.0f / std::sqrt(static_cast<float>(c.hidden_size)));
  }
  w.final_norm = norm();
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights l;
    l.input_norm = norm();
    l.qkv = linear(c.qkv_size(), c.hidden_size);
    l.o = linear(c.hidden_size, c.q_size());
    l.gate_up = linear(2 * c.intermediate_size, c.hidden_size);
    l.down = linear(c.hidden_size, c.intermediate_size);
    w.layers.push_back(std::move(l));
  }
  TIDE_CUDA_CHECK(cudaStreamSynchronize(stream));
  return w;
}

}  // namespace tide::bench
