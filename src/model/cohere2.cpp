#include "model/cohere2.h"

#include <algorithm>

#include "core/error.h"
#include "model/checkpoint.h"

namespace tide {
namespace {

// Host-side metadata of one forward, uploaded once and shared by all layers of a group.
struct BatchMetadata {
  Tensor token_ids;                     // [T] i32
  Tensor logit_rows;                    // [R] i32
  std::vector<AttentionBatch> groups;   // one per layer group
};

BatchMetadata build_metadata(const ForwardBatch& batch, const ModelConfig& config, int64_t block_size,
                             Backend& backend) {
  const int64_t num_tokens = static_cast<int64_t>(batch.token_ids.size());
  const int64_t num_seqs = static_cast<int64_t>(batch.seqs.size());
  std::vector<int32_t> positions, seq_starts{0};
  int64_t max_seq_tokens = 0;
  for (const ForwardSequence& s : batch.seqs) {
    TIDE_CHECK(s.num_tokens > 0 && s.start_pos >= 0 && s.block_tables.size() == config.groups.size());
    for (int64_t i = 0; i < s.num_tokens; ++i) positions.push_back(static_cast<int32_t>(s.start_pos + i));
    max_seq_tokens = std::max(max_seq_tokens, s.num_tokens);
    seq_starts.push_back(static_cast<int32_t>(positions.size()));
  }
  TIDE_CHECK(static_cast<int64_t>(positions.size()) == num_tokens);
  for (int32_t idx : batch.logit_indices) TIDE_CHECK(idx >= 0 && idx < num_tokens);
  for (int32_t id : batch.token_ids) {
    if (id < 0 || id >= config.vocab_size) fail("token id {} is out of range for a vocabulary of {}", id, config.vocab_size);
  }

  BatchMetadata m;
  m.token_ids = backend.upload(batch.token_ids.data(), DType::kI32, Shape{num_tokens});
  m.logit_rows = backend.upload(batch.logit_indices.data(), DType::kI32,
                                Shape{static_cast<int64_t>(batch.logit_indices.size())});
  const Tensor positions_t = backend.upload(positions.data(), DType::kI32, Shape{num_tokens});
  const Tensor starts_t = backend.upload(seq_starts.data(), DType::kI32, Shape{num_seqs + 1});

  for (size_t g = 0; g < config.groups.size(); ++g) {
    size_t max_blocks = 1;
    for (const ForwardSequence& s : batch.seqs) max_blocks = std::max(max_blocks, s.block_tables[g].size());
    std::vector<int32_t> tables(static_cast<size_t>(num_seqs) * max_blocks, kNullBlock);
    std::vector<int64_t> slots;
    for (size_t s = 0; s < batch.seqs.size(); ++s) {
      const ForwardSequence& seq = batch.seqs[s];
      std::copy(seq.block_tables[g].begin(), seq.block_tables[g].end(), tables.begin() + s * max_blocks);
      for (int64_t pos = seq.start_pos; pos < seq.start_pos + seq.num_tokens; ++pos) {
        const size_t logical = static_cast<size_t>(pos / block_size);
        TIDE_CHECK(logical < seq.block_tables[g].size() && seq.block_tables[g][logical] != kNullBlock);
        slots.push_back(int64_t{seq.block_tables[g][logical]} * block_size + pos % block_size);
      }
    }
    m.groups.push_back(AttentionBatch{
        positions_t, starts_t,
        backend.upload(tables.data(), DType::kI32, Shape{num_seqs, static_cast<int64_t>(max_blocks)}),
        backend.upload(slots.data(), DType::kI64, Shape{num_tokens}), block_size,
        positions.empty() ? 0 : *std::max_element(positions.begin(), positions.end()), max_seq_tokens});
  }
  return m;
}

}  // namespace

Cohere2Model::Cohere2Model(ModelConfig config, Cohere2Weights weights, Backend& backend)
    : config_(std::move(config)), weights_(std::move(weights)), backend_(&backend) {
  const std::vector<float> inv_freq = config_.rope_inv_freq();
  rope_inv_freq_ = backend.upload(inv_freq.data(), DType::kF32, Shape{static_cast<int64_t>(inv_freq.size())});
}

Cohere2Model Cohere2Model::load(const std::filesystem::path& dir, Backend& backend) {
  ModelConfig config = ModelConfig::from_dir(dir);
  const Checkpoint checkpoint = Checkpoint::open(dir);
  Cohere2Weights weights = Cohere2Weights::load(config, checkpoint, backend);
  return Cohere2Model(std::move(config), std::move(weights), backend);
}

int64_t Cohere2Model::kv_block_bytes(int group, int64_t block_size) const {
  const int64_t layers = config_.groups[static_cast<size_t>(group)].num_layers();
  return layers * 2 * block_size * config_.kv_size() * static_cast<int64_t>(dtype_size(backend_->weight_dtype()));
}

std::vector<KvStorage> Cohere2Model::allocate_kv(int64_t block_size, const std::vector<int32_t>& num_blocks) const {
  TIDE_CHECK(num_blocks.size() == config_.groups.size());
  std::vector<KvStorage> kv;
  for (size_t g = 0; g < config_.groups.size(); ++g) {
    const int64_t layers = config_.groups[g].num_layers();
    Tensor data = backend_->alloc(backend_->weight_dtype(),
                                  Shape{num_blocks[g], layers, 2 * block_size, config_.kv_size()});
    kv.push_back(KvStorage{data, layers, block_size});
  }
  return kv;
}

Tensor Cohere2Model::forward(const ForwardBatch& batch, std::vector<KvStorage>& kv) const {
  TIDE_CHECK(kv.size() == config_.groups.size());
  Backend& b = *backend_;
  const ModelConfig& c = config_;
  const int64_t num_tokens = static_cast<int64_t>(batch.token_ids.size());
  const BatchMetadata meta = build_metadata(batch, c, kv.front().block_size, b);
  const AttentionShape shape = attention_shape();
  const auto eps = static_cast<float>(c.layer_norm_eps);

  const DType adt = b.activation_dtype();
  Tensor h = b.alloc(adt, Shape{num_tokens, c.hidden_size});
  Tensor x = b.alloc(adt, Shape{num_tokens, c.hidden_size});
  Tensor qkv = b.alloc(adt, Shape{num_tokens, c.qkv_size()});
  Tensor attn = b.alloc(adt, Shape{num_tokens, c.q_size()});
  Tensor attn_out = b.alloc(adt, Shape{num_tokens, c.hidden_size});
  Tensor gate_up = b.alloc(adt, Shape{num_tokens, 2 * c.intermediate_size});
  Tensor act = b.alloc(adt, Shape{num_tokens, c.intermediate_size});
  Tensor mlp_out = b.alloc(adt, Shape{num_tokens, c.hidden_size});

  b.embedding(h, weights_.embed, meta.token_ids);
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const LayerSpec& spec = c.layers[i];
    const LayerWeights& w = weights_.layers[i];
    KvStorage& group_kv = kv[static_cast<size_t>(spec.group_idx)];
    const AttentionBatch& group_batch = meta.groups[static_cast<size_t>(spec.group_idx)];

    b.layer_norm(x, h, w.input_norm, eps);  // one norm feeds both attention and MLP (parallel block)
    b.matmul(qkv, x, w.qkv, 1.0f);
    if (spec.rope) b.rope(qkv, group_batch.positions, rope_inv_freq_, c.num_heads + c.num_heads_kv);
    b.store_kv(group_kv, spec.layer_idx_in_group, qkv, group_batch.slot_mapping, shape);
    b.attention(attn, qkv, group_kv, spec.layer_idx_in_group, group_batch, shape, spec.window);
    b.matmul(attn_out, attn, w.o, 1.0f);

    b.matmul(gate_up, x, w.gate_up, 1.0f);
    b.silu_mul(act, gate_up);
    b.matmul(mlp_out, act, w.down, 1.0f);

    b.add(h, h, attn_out);  // (h + attn) + mlp, in transformers' order
    b.add(h, h, mlp_out);
  }

  const int64_t num_rows = meta.logit_rows.numel();
  Tensor rows = b.alloc(adt, Shape{num_rows, c.hidden_size});
  b.gather_rows(rows, h, meta.logit_rows);  // the final norm is per token: normalize only sampled rows
  b.layer_norm(rows, rows, weights_.final_norm, eps);
  Tensor logits = b.alloc(DType::kF32, Shape{num_rows, c.vocab_size});  // f32 whatever the activations
  b.matmul(logits, rows, weights_.lm_head, static_cast<float>(c.logit_scale));
  return logits;
}

}  // namespace tide
