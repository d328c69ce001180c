#include "model/cohere2.h"

#include <algorithm>
#include <bit>
#include <map>
#include <tuple>

#include "core/error.h"
#include "model/checkpoint.h"
#include "model/step_metadata.h"

namespace tide {
namespace {

// Decode and verify batches of up to this many rows (sequences padded to a power of two, times the tokens per
// sequence) are replayed from graphs.
constexpr int64_t kMaxGraphBatch = 256;
// Steps whose sequences bring up to this many tokens each (decodes, verify steps; padded to the step's most)
// replay graphs: the decode attention kernel's bound (backend/cuda), past which a step is a prefill.
constexpr int64_t kMaxGraphSeqTokens = 8;
// Smallest position bucket of a graph: contexts are rounded up to a power of two at least this large, so a
// sequence passes through few buckets (a new bucket costs one recording).
constexpr int64_t kMinGraphPositions = 256;

}  // namespace

// Recorded decode and verify steps, by (padded sequences, tokens per sequence, position bucket, every token a
// logit row).
struct DecodeGraphs {
  struct Entry {
    StepMetadata meta;
    std::unique_ptr<Backend::Graph> graph;
  };
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Entry> entries;
  bool unsupported = false;  // the backend does not record (the CPU)
  Tensor logits;  // [kMaxGraphBatch, vocab] f32: every graph writes its logits here
};

namespace {

// While it lives, ops go to the backend's second queue (Backend::side_begin); the main queue takes them
// again when it goes, also when an op throws.
class SideQueue {
 public:
  explicit SideQueue(Backend& b) : b_(b) { b_.side_begin(); }
  ~SideQueue() { b_.side_end(); }
  SideQueue(const SideQueue&) = delete;
  SideQueue& operator=(const SideQueue&) = delete;

 private:
  Backend& b_;
};

}  // namespace

Cohere2Model::Cohere2Model(ModelConfig config, Cohere2Weights weights, Backend& backend)
    : config_(std::move(config)), weights_(std::move(weights)), backend_(&backend),
      graphs_(std::make_unique<DecodeGraphs>()) {
  const std::vector<float> inv_freq = config_.rope_inv_freq();
  rope_inv_freq_ = backend.upload(inv_freq.data(), DType::kF32, Shape{static_cast<int64_t>(inv_freq.size())});
}

Cohere2Model::~Cohere2Model() = default;
Cohere2Model::Cohere2Model(Cohere2Model&&) noexcept = default;

Cohere2Model Cohere2Model::load(const std::filesystem::path& dir, Backend& backend, const WeightLoadOptions& options) {
  ModelConfig config = ModelConfig::from_dir(dir);
  if (options.load_format == LoadFormat::kDummy) {
    Cohere2Weights weights = Cohere2Weights::dummy(config, backend, options);
    return Cohere2Model(std::move(config), std::move(weights), backend);
  }
  const Checkpoint checkpoint = Checkpoint::open(dir);
  Cohere2Weights weights = Cohere2Weights::load(config, checkpoint, backend, options);
  return Cohere2Model(std::move(config), std::move(weights), backend);
}

int64_t Cohere2Model::kv_block_bytes(int64_t block_size, KvCacheDtype dtype) const {
  // With config.h's bounds (layers, kv heads x head_dim <= hidden size) this bound keeps the product in int64.
  if (block_size <= 0 || block_size > (int64_t{1} << 20)) fail("block size must be in [1, 2^20], got {}", block_size);
  return tide::kv_block_bytes(dtype == KvCacheDtype::kFp8 ? DType::kF8E4M3 : backend_->weight_dtype(),
                              config_.layers_per_kv_block, block_size, config_.num_heads_kv, config_.head_dim);
}

std::vector<KvStorage> Cohere2Model::allocate_kv(int64_t block_size, int32_t num_blocks, KvCacheDtype dtype) const {
  const bool fp8 = dtype == KvCacheDtype::kFp8;
  if (fp8 && !backend_->supports_fp8_kv(config_.head_dim)) {
    fail("the {} backend has no FP8 KV cache for head_dim {}", backend_->name(), config_.head_dim);
  }
  const int64_t layers = config_.layers_per_kv_block;
  Tensor data = backend_->alloc(fp8 ? DType::kF8E4M3 : backend_->weight_dtype(),
                                Shape{num_blocks, layers, 2 * block_size, config_.kv_size()});
  Tensor scales = fp8 ? backend_->alloc(DType::kF32, Shape{num_blocks, layers, 2 * config_.num_heads_kv, block_size})
                      : Tensor{};
  return std::vector<KvStorage>(config_.groups.size(), KvStorage{data, layers, block_size, scales});
}

Tensor Cohere2Model::forward(const ForwardBatch& batch, std::vector<KvStorage>& kv, const Tensor* token_ids) const {
  TIDE_CHECK(kv.size() == config_.groups.size());
  TIDE_CHECK(token_ids == nullptr || (token_ids->dtype == DType::kI32 && token_ids->numel() == std::ssize(batch.token_ids)));
  ++counts_.steps;
  const int64_t block_size = kv.front().block_size;
  const auto num_tokens = std::ssize(batch.token_ids);
  bool all_rows = std::ssize(batch.logit_indices) == num_tokens;
  for (int64_t i = 0; all_rows && i < num_tokens; ++i) all_rows = batch.logit_indices[static_cast<size_t>(i)] == i;
  // Few tokens per sequence (decodes, verify steps, a draft model's catching up), few rows once padded: every
  // sequence padded to the most tokens of one (pad_sequences). Steps whose every token is a logit row, the
  // same number per sequence, replay graphs that compute every row's logits; the others (ragged verify steps:
  // requests with fewer drafts; logits of some tokens only) graphs that gather their rows first, as long as the
  // padding at most doubles the tokens (past that, the padded rows' work costs more than running eagerly).
  int64_t per_seq = 0;
  for (const ForwardSequence& s : batch.seqs) per_seq = std::max(per_seq, s.num_tokens);
  bool uniform = per_seq > 0, room = true;  // room: each sequence has computed the positions its padding takes
  for (const ForwardSequence& s : batch.seqs) {
    uniform = uniform && s.num_tokens == per_seq;
    room = room && s.start_pos >= per_seq - s.num_tokens;
  }
  const bool every_token = all_rows && uniform;
  const auto seqs_padded = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<size_t>(batch.seqs.size(), 1))));
  const int64_t padded_tokens = seqs_padded * per_seq;
  if (graphs_enabled_ && !graphs_->unsupported && per_seq > 0 && per_seq <= kMaxGraphSeqTokens &&
      padded_tokens <= kMaxGraphBatch &&
      (every_token || (token_ids == nullptr && room && padded_tokens <= std::max<int64_t>(2 * num_tokens, 16)))) {
    return forward_graph(batch, per_seq, every_token, kv, token_ids);
  }
  const StepMetadata meta = upload_metadata(host_metadata(batch, config_, block_size, 0), *backend_, block_size);
  if (token_ids != nullptr) backend_->copy(meta.token_ids, token_ids->reshape(meta.token_ids.shape));
  Tensor logits = backend_->alloc(DType::kF32, Shape{meta.logit_rows.numel(), config_.vocab_size});
  run_layers(meta, kv, logits);
  return logits;
}

// A decode or verify step through a recorded graph: every sequence is padded to per_seq tokens and the batch to
// a power of two of sequences (pad_sequences), and its positions' bucket (a power of two) fixes the block
// tables' width and the attention launch, so steps of one bucket replay the same graph with new inputs.
// The first step of a bucket runs eagerly (loading kernels, choosing matmul algorithms), then is recorded.
Tensor Cohere2Model::forward_graph(const ForwardBatch& batch, int64_t per_seq, bool every_token,
                                   std::vector<KvStorage>& kv, const Tensor* token_ids) const {
  Backend& b = *backend_;
  const int64_t block_size = kv.front().block_size;
  const auto num_tokens = std::ssize(batch.token_ids);
  int64_t max_position = per_seq - 1;  // the added sequences'
  for (const ForwardSequence& s : batch.seqs) max_position = std::max(max_position, s.start_pos + s.num_tokens - 1);
  const auto bucket = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(batch.seqs.size())));
  const auto positions = std::max(kMinGraphPositions, static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(max_position + 1))));
  HostMetadata host = host_metadata(batch, config_, block_size, (positions + block_size - 1) / block_size);
  pad_sequences(host, per_seq, bucket, every_token);
  host.max_position = positions - 1;  // an upper bound is all the attention launch needs
  ++counts_.padded;
  const auto num_rows = std::ssize(batch.logit_indices);

  DecodeGraphs& cache = *graphs_;
  if (cache.logits.empty()) cache.logits = b.alloc(DType::kF32, Shape{kMaxGraphBatch, config_.vocab_size});
  const Tensor logits = cache.logits.slice_rows(0, bucket * per_seq);
  const auto key = std::make_tuple(bucket, per_seq, positions, every_token);
  // The device's ids over the first tokens of the padded batch (the padding keeps its placeholder ids).
  const auto take_ids = [&](const StepMetadata& meta) {
    if (token_ids != nullptr) b.copy(meta.token_ids.slice_rows(0, num_tokens), token_ids->reshape(Shape{num_tokens}));
  };
  auto it = cache.entries.find(key);
  if (it != cache.entries.end()) {
    update_metadata(it->second.meta, host, b);
    take_ids(it->second.meta);
    it->second.graph->replay();
    ++counts_.replayed;
    return logits.slice_rows(0, num_rows);
  }
  StepMetadata meta = upload_metadata(host, b, block_size);
  take_ids(meta);
  run_layers(meta, kv, logits);
  std::unique_ptr<Backend::Graph> graph = b.capture([&] { run_layers(meta, kv, logits); });
  if (graph) {
    cache.entries.emplace(key, DecodeGraphs::Entry{std::move(meta), std::move(graph)});
    ++counts_.recorded;
  } else {
    cache.unsupported = true;
  }
  return logits.slice_rows(0, num_rows);
}

void Cohere2Model::run_layers(const StepMetadata& meta, std::vector<KvStorage>& kv, Tensor logits) const {
  Backend& b = *backend_;
  const ModelConfig& c = config_;
  const int64_t num_tokens = meta.token_ids.numel();
  const AttentionShape shape = attention_shape();
  const auto eps = static_cast<float>(c.layer_norm_eps);

  // Every buffer below is written in full before it is read: none is zeroed (on a GPU each memset is a kernel
  // on the step's serial path, and a decode step is short enough for them to show).
  const DType adt = b.activation_dtype();
  auto buffer = [&](DType dtype, int64_t cols) { return b.alloc_uninitialized(dtype, Shape{num_tokens, cols}); };
  Tensor h = buffer(adt, c.hidden_size);
  Tensor x = buffer(adt, c.hidden_size);
  Tensor qkv = buffer(adt, c.qkv_size());
  Tensor attn = buffer(adt, c.q_size());
  Tensor attn_out = buffer(adt, c.hidden_size);
  Tensor gate_up = buffer(adt, 2 * c.intermediate_size);
  Tensor act = buffer(adt, c.intermediate_size);
  Tensor mlp_out = buffer(adt, c.hidden_size);

  // FP8 linear layers take their input quantized per token: x once for qkv and gate_up (one norm feeds both;
  // the norm writes the codes directly where both are FP8), the attention output before o, and the MLP
  // activation, fused with its SwiGLU, before down. Each input has its own codes and scales: the attention
  // and MLP chains run side by side (Backend::side_begin).
  const bool fp8 = weights_.has_fp8();
  auto codes = [&](int64_t cols) { return fp8 ? buffer(DType::kF8E4M3, cols) : Tensor{}; };
  auto token_scales = [&] { return fp8 ? b.alloc_uninitialized(DType::kF32, Shape{num_tokens}) : Tensor{}; };
  Tensor x_codes = codes(c.hidden_size), x_scales = token_scales();
  Tensor attn_codes = codes(c.q_size()), attn_scales = token_scales();
  Tensor act_codes = codes(c.intermediate_size), act_scales = token_scales();
  // Whether x_codes hold this layer's x; x itself is then not written.
  bool x_quantized = false;
  // Layer i's norm output only ever feeds FP8 projections (false for models without FP8 weights).
  auto x_only_fp8 = [&](size_t i) { return weights_.layers[i].qkv.fp8() && weights_.layers[i].gate_up.fp8(); };
  // out = in @ l^T; an FP8 weight takes its input as in_codes / in_scales, already quantized.
  auto project = [&](Tensor out, const Tensor& in, const Tensor& in_codes, const Tensor& in_scales, const Linear& l) {
    if (l.fp8()) {
      b.matmul_fp8(out, in_codes, in_scales, l.weight, l.scale, 1.0f);
    } else {
      b.matmul(out, in, l.weight, 1.0f);
    }
  };

  b.embedding(h, weights_.embed, meta.token_ids);
  // One norm feeds attention and MLP (parallel block).
  if (x_only_fp8(0)) {
    b.layer_norm_fp8(x_codes, x_scales, h, weights_.layers.front().input_norm, eps, x);
    x_quantized = true;
  } else {
    b.layer_norm(x, h, weights_.layers.front().input_norm, eps);
  }
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const LayerSpec& spec = c.layers[i];
    const LayerWeights& w = weights_.layers[i];
    KvStorage& group_kv = kv[static_cast<size_t>(spec.group_idx)];
    const AttentionBatch& group_batch = meta.groups[static_cast<size_t>(spec.group_idx)];

    if (!x_quantized && (w.qkv.fp8() || w.gate_up.fp8())) b.quantize_fp8(x_codes, x_scales, x);
    // The MLP (gate_up, SwiGLU, down) on the backend's second queue, beside the attention chain (qkv, RoPE +
    // KV store, attention, o): both start from the norm. At decode sizes in FP8 on CUDA qkv and gate_up stream
    // their weights at once (qkv on one CTA per SM beside gate_up's two, fp8_small_matmul.cu), and the attention
    // kernels, which wait on memory latency, run on the SMs qkv's CTAs leave while gate_up still streams.
    // Nothing there allocates (Backend::side_begin).
    {
      const SideQueue side(b);
      project(gate_up, x, x_codes, x_scales, w.gate_up);
      if (w.down.fp8()) {
        b.silu_mul_fp8(act_codes, act_scales, gate_up, act);
      } else {
        b.silu_mul(act, gate_up);
      }
      project(mlp_out, act, act_codes, act_scales, w.down);
    }
    project(qkv, x, x_codes, x_scales, w.qkv);
    if (spec.rope) {
      b.rope_store_kv(group_kv, spec.layer_idx_in_group, qkv, group_batch.positions, rope_inv_freq_,
                      group_batch.slot_mapping, shape);
    } else {
      b.store_kv(group_kv, spec.layer_idx_in_group, qkv, group_batch.slot_mapping, shape);
    }
    b.attention(attn, qkv, group_kv, spec.layer_idx_in_group, group_batch, shape, spec.window);
    if (w.o.fp8()) b.quantize_fp8(attn_codes, attn_scales, attn);
    project(attn_out, attn, attn_codes, attn_scales, w.o);
    b.side_join();

    // h = (h + attn) + mlp, in transformers' order, then the next layer's input norm.
    x_quantized = false;  // x is new for the next layer
    if (i + 1 < c.layers.size()) {
      const Tensor& next_norm = weights_.layers[i + 1].input_norm;
      if (x_only_fp8(i + 1)) {
        b.residual_layer_norm_fp8(h, attn_out, mlp_out, x_codes, x_scales, next_norm, eps, x);
        x_quantized = true;
      } else {
        b.residual_layer_norm(h, attn_out, mlp_out, x, next_norm, eps);
      }
    } else if (meta.logits_of_every_token) {
      // Every token's row is sampled (decode): the last residual with the final norm, in one kernel.
      b.residual_layer_norm(h, attn_out, mlp_out, x, weights_.final_norm, eps);
    } else {
      b.add(h, h, attn_out);
      b.add(h, h, mlp_out);
    }
  }

  if (meta.logits_of_every_token) {
    b.matmul(logits, x, weights_.lm_head, static_cast<float>(c.logit_scale));  // f32 whatever the activations
    return;
  }
  Tensor rows = b.alloc_uninitialized(adt, Shape{meta.logit_rows.numel(), c.hidden_size});
  b.gather_rows(rows, h, meta.logit_rows);  // the final norm is per token: normalize only sampled rows
  b.layer_norm(rows, rows, weights_.final_norm, eps);
  b.matmul(logits, rows, weights_.lm_head, static_cast<float>(c.logit_scale));
}

}  // namespace tide
