// Cohere2Weights: the checkpoint's tensors, validated against the config and uploaded to a backend (or, with
// load_format "dummy", random values of the config's shapes made on the backend). q/k/v and gate/up are fused
// at load (rows concatenated) so each is one matmul on every backend.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace tide {

class Checkpoint;

// A linear layer's weight [out, in]: in the backend's weight dtype, or FP8 E4M3 codes with one f32 scale per
// output row (w ~ weight[r] x scale[r]; core/fp8.h).
struct Linear {
  Tensor weight;
  Tensor scale;  // [out] F32 when weight is F8E4M3; empty otherwise

  bool fp8() const { return weight.dtype == DType::kF8E4M3; }
};

struct LayerWeights {
  Tensor input_norm;  // [H]
  Linear qkv;         // [(Hq + 2 Hkv) * D, H]: q_proj rows, then k_proj, then v_proj
  Linear o;           // [H, Hq * D]
  Linear gate_up;     // [2 I, H]: gate_proj rows, then up_proj
  Linear down;        // [H, I]
};

// Where the weights come from: the folder's safetensors checkpoint, or random weights from config.json alone
// (kDummy, vLLM's load format "dummy"), for serving and benchmarking a model's shape without its checkpoint.
enum class LoadFormat { kAuto, kDummy };

struct WeightLoadOptions {
  // Quantize the linear layers of a BF16 / F16 / F32 checkpoint to FP8 at load (rowwise, core/fp8.h: on the
  // backend, Backend::quantize_fp8, from the checkpoint's own values); embedding, lm_head and norms stay as
  // they are.
  bool quantize_fp8 = false;
  // Called after each layer is uploaded with the checkpoint bytes read so far and in all (progress display);
  // for dummy weights, the bytes a bf16 checkpoint of the model would hold.
  std::function<void(int64_t done, int64_t total)> progress;
  LoadFormat load_format = LoadFormat::kAuto;
};

// The dummy weights: every matrix (embedding, lm_head, linear layers) uniform in [-kDummyWeightScale,
// kDummyWeightScale) (vLLM's dummy range), norm weights 1. LayerNorm rescales every layer's input to unit
// variance, so activations stay finite and small through any number of layers.
inline constexpr float kDummyWeightScale = 1e-3f;

struct Cohere2Weights {
  Tensor embed;       // [V, H]
  Tensor lm_head;     // [V, H]: the same tensor as embed when tie_word_embeddings
  Tensor final_norm;  // [H]
  std::vector<LayerWeights> layers;

  // Checks every tensor's presence, dtype (F32, F16, BF16; linear weights also F8_E4M3 with a `weight_scale`
  // [out, 1] or [out] beside them, as compressed-tensors writes) and shape against `config` before reading it,
  // then uploads. Throws tide::Error naming the tensor and its file.
  static Cohere2Weights load(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend,
                             const WeightLoadOptions& options = {});
  // Random weights of `config`'s shapes made on `backend` (Backend::fill_uniform, one seed per tensor in load
  // order: the same values on every load), in the backend's weight dtype; the linear layers quantized to FP8
  // on the backend when options.quantize_fp8 or config.json describes an FP8 checkpoint. lm_head is its own
  // tensor unless tie_word_embeddings. options.load_format is not read.
  static Cohere2Weights dummy(const ModelConfig& config, Backend& backend, const WeightLoadOptions& options = {});
  // Whether any linear layer is FP8.
  bool has_fp8() const;
};

}  // namespace tide
