// Cohere2Weights: the checkpoint's tensors, validated against the config and uploaded to a backend.
// q/k/v and gate/up are fused at load (rows concatenated) so each is one matmul on every backend.
#pragma once

#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace tide {

class Checkpoint;

struct LayerWeights {
  Tensor input_norm;  // [H]
  Tensor qkv;         // [(Hq + 2 Hkv) * D, H]: q_proj rows, then k_proj, then v_proj
  Tensor o;           // [H, Hq * D]
  Tensor gate_up;     // [2 I, H]: gate_proj rows, then up_proj
  Tensor down;        // [H, I]
};

struct Cohere2Weights {
  Tensor embed;       // [V, H]
  Tensor lm_head;     // [V, H]: the same tensor as embed when tie_word_embeddings
  Tensor final_norm;  // [H]
  std::vector<LayerWeights> layers;

  // Checks every tensor's presence, dtype (F32, F16, BF16) and shape against `config` before reading it,
  // then uploads. Throws tide::Error naming the tensor and its file.
  static Cohere2Weights load(const ModelConfig& config, const Checkpoint& checkpoint, Backend& backend);
};

}  // namespace tide
