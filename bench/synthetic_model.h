// A synthetic Cohere2 model for benchmarks: the config of a real model (R7B's or Command-A's shapes, or
// a config.json), validated by ModelConfig::from_json like a checkpoint's, and random bf16 weights generated
// on the GPU (with --fp8: the linear layers quantized to E4M3 with one scale per row, as `tide quantize` does). No checkpoint, no host copies of the weights. Not for correctness: the values are noise.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_backend.h"
#include "model/config.h"
#include "model/weights.h"

namespace tide::bench {

// The config.json object of `spec`: "r7b", "command-a" or a path to a config.json. `num_layers` replaces
// num_hidden_layers (the sliding pattern is kept; a layer_types list is cut to the new length). The dtype is
// always bfloat16. Throws tide::Error for an unknown spec or unreadable file.
nlohmann::json synthetic_config_json(const std::string& spec, std::optional<int64_t> num_layers);

// Bytes of the weights of `config` in bf16 (embedding counted once: it is tied to the logits matrix); with
// fp8, the linear layers count one byte per parameter plus an f32 scale per row.
int64_t weight_bytes(const ModelConfig& config, bool fp8);
// Parameters of the per-layer matmuls (qkv, o, gate_up, down) over all layers: 2 FLOPs each per token.
int64_t linear_params(const ModelConfig& config);

// Random weights on `backend`: linear weights uniform in +-1/sqrt(fan_in), the embedding in +-1/sqrt(H)*4,
// norm weights in 1 +- 0.1; with fp8 each linear weight is made in bf16 and quantized per row on the GPU
// (rowwise scales = amax / 448). Queued on the backend's stream; synchronizes before returning.
Cohere2Weights synthetic_weights(const ModelConfig& config, CudaBackend& backend, bool fp8);

}  // namespace tide::bench
