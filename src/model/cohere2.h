// Cohere2Model: the Cohere2ForCausalLM forward pass (transformers' modeling_cohere2), written once against the Backend
// interface. One call runs a whole batch (prefill chunks and decode tokens of many sequences) over the paged
// KV cache and returns logits only for the requested tokens. Owns no KV memory and no scheduling policy.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "core/forward_batch.h"
#include "model/weights.h"

namespace tide {

struct StepMetadata;  // one step's metadata in backend memory (cohere2.cpp)
struct DecodeGraphs;  // recorded decode steps (cohere2.cpp)

class Cohere2Model {
 public:
  Cohere2Model(ModelConfig config, Cohere2Weights weights, Backend& backend);
  // Reads DIR/config.json and the safetensors checkpoint, validates and uploads (load_format "dummy": random
  // weights from config.json alone, no checkpoint read). Throws tide::Error. `options`: e.g. quantize the
  // linear layers to FP8 at load.
  static Cohere2Model load(const std::filesystem::path& dir, Backend& backend, const WeightLoadOptions& options = {});
  ~Cohere2Model();
  Cohere2Model(Cohere2Model&&) noexcept;

  const ModelConfig& config() const { return config_; }
  Backend& backend() const { return *backend_; }

  // Bytes of one KV block: K and V of layers_per_kv_block layers for block_size positions (the same for every
  // layer group), with their scales for an FP8 cache.
  int64_t kv_block_bytes(int64_t block_size, KvCacheDtype dtype = KvCacheDtype::kAuto) const;
  // Allocates the KV arena: num_blocks blocks of block_size positions, and returns one KvStorage per layer
  // group, all views of that one arena (a block id means the same memory in every group; the KV cache
  // manager gives each block to one group at a time). Throws tide::Error for an FP8 cache on a backend
  // without one (Backend::supports_fp8_kv).
  std::vector<KvStorage> allocate_kv(int64_t block_size, int32_t num_blocks,
                                     KvCacheDtype dtype = KvCacheDtype::kAuto) const;

  // Runs one step. Writes the new tokens' K/V into `kv` (one storage per group) through the batch's block
  // tables, then returns logits [batch.logit_indices.size(), vocab] (f32, in backend memory), valid until the
  // next call. Batches whose every token is a logit row, the same number (at most 8) per sequence (decodes,
  // speculative verify steps), of up to 256 rows once padded, replay a recorded graph where the backend records them (see
  // set_graphs_enabled); the results are the same either way, within the rounding of the padded shapes.
  // `token_ids`, when given ([T] i32 in backend memory), holds the step's token ids in place of batch.token_ids
  // (whose values are then not read): a step can take the ids a previous step sampled on the device without
  // the host waiting for them (draft-model speculation's chained draft steps).
  Tensor forward(const ForwardBatch& batch, std::vector<KvStorage>& kv, const Tensor* token_ids = nullptr) const;
  // Whether forward() may record and replay decode steps (default: yes; off is vLLM's --enforce-eager).
  void set_graphs_enabled(bool enabled) { graphs_enabled_ = enabled; }
  // Steps forward() has run so far: replayed from a recorded graph, and recorded (each after an eager run of
  // the same step); the others ran eagerly. `padded`: the steps laid out for a graph (replayed, recorded, or
  // the eager run before a recording a backend refused). Counted on the calling thread (the engine's loop).
  struct GraphCounts {
    int64_t steps = 0, replayed = 0, recorded = 0, padded = 0;
  };
  GraphCounts graph_counts() const { return counts_; }

 private:
  // A batch of sequences that bring at most per_seq tokens each (forward()'s graph condition); every_token: as
  // many each, every token a logit row.
  Tensor forward_graph(const ForwardBatch& batch, int64_t per_seq, bool every_token, std::vector<KvStorage>& kv,
                       const Tensor* token_ids) const;
  // The layers, the final norm and the logits of meta.logit_rows into `logits` [R, vocab] f32.
  void run_layers(const StepMetadata& meta, std::vector<KvStorage>& kv, Tensor logits) const;

  AttentionShape attention_shape() const {
    return AttentionShape{config_.num_heads, config_.num_heads_kv, config_.head_dim};
  }

  ModelConfig config_;
  Cohere2Weights weights_;
  Tensor rope_inv_freq_;  // [head_dim / 2] f32, from ModelConfig::rope_inv_freq()
  Backend* backend_;
  bool graphs_enabled_ = true;
  std::unique_ptr<DecodeGraphs> graphs_;  // a cache: filled by the const forward()
  mutable GraphCounts counts_;
};

}  // namespace tide
