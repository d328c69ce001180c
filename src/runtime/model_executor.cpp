#include "runtime/model_executor.h"

#include "core/error.h"

namespace tide {

ModelExecutor::ModelExecutor(const std::filesystem::path& model_dir, std::unique_ptr<Backend> backend,
                             const WeightLoadOptions& options, const std::filesystem::path& draft_dir)
    : backend_(std::move(backend)), model_(Cohere2Model::load(model_dir, *backend_, options)) {
  if (draft_dir.empty()) return;
  // The draft's ids go straight into the model's embedding, and the model's ids into the draft's.
  const ModelConfig draft_config = ModelConfig::from_dir(draft_dir);
  if (draft_config.vocab_size != model_.config().vocab_size) {
    fail("the draft model {} has a vocabulary of {} tokens, the model {} has {}: a draft must share the model's "
         "vocabulary", draft_dir.string(), draft_config.vocab_size, model_dir.string(), model_.config().vocab_size);
  }
  WeightLoadOptions draft_options = options;
  draft_options.progress = nullptr;  // the progress callback counts the model's bytes
  draft_ = std::make_unique<Cohere2Model>(Cohere2Model::load(draft_dir, *backend_, draft_options));
}

void ModelExecutor::allocate_draft_kv(int64_t block_size, int32_t num_blocks, KvCacheDtype dtype) {
  TIDE_CHECK(draft_ != nullptr);
  try {
    draft_kv_ = draft_->allocate_kv(block_size, num_blocks, dtype);
  } catch (const Error& e) {
    fail("the draft model's KV cache ({} blocks of {} bytes) cannot be allocated: {}", num_blocks,
         draft_->kv_block_bytes(block_size, dtype), e.what());
  }
}

void ModelExecutor::share_draft_kv(int64_t block_size, int64_t num_layers) {
  TIDE_CHECK(draft_ != nullptr && !kv_.empty());
  const KvStorage& arena = kv_.front();
  const ModelConfig& c = draft_->config();
  const int64_t blocks = arena.data.dim(0);
  KvStorage view{arena.data.reshape(Shape{blocks, num_layers, 2 * block_size, c.kv_size()}), num_layers, block_size,
                 arena.fp8() ? arena.scales.reshape(Shape{blocks, num_layers, 2 * c.num_heads_kv, block_size}) : Tensor{}};
  TIDE_CHECK(num_layers >= c.layers_per_kv_block);
  draft_kv_ = std::vector<KvStorage>(c.groups.size(), view);
}

void ModelExecutor::draft_step(const ForwardBatch& batch, std::span<const SamplingRow> rows, Tensor keep, Tensor ids,
                               const Tensor* token_ids) {
  TIDE_CHECK(draft_ != nullptr && !batch.logit_indices.empty() && rows.size() == batch.logit_indices.size() &&
             ids.numel() == std::ssize(rows));
  const Tensor logits = draft_->forward(batch, draft_kv_, token_ids);
  if (keep.data != nullptr) backend_->copy(keep, logits);
  backend_->sample(ids, logits, SamplingBatch{rows, {}, {}, {}, {}});
}

void ModelExecutor::allocate_kv(int64_t block_size, const KvArenaSpec& arena, KvCacheDtype dtype) {
  // An allocation that cannot be made is named by the flag that sized it, with the bytes asked for (the
  // backend's message adds what is available).
  const int64_t block_bytes = model_.kv_block_bytes(block_size, dtype);
  try {
    host_kv_ = backend_->alloc_host(DType::kU8, Shape{arena.num_host_blocks, block_bytes});
  } catch (const Error& e) {
    fail("the host tier of the KV cache (host_kv_cache_memory: {} blocks of {} bytes) cannot be allocated: {}",
         arena.num_host_blocks, block_bytes, e.what());
  }
  try {
    kv_ = model_.allocate_kv(block_size, arena.num_blocks, dtype);
  } catch (const Error& e) {
    fail("the KV cache (kv_cache_memory: {} blocks of {} bytes) cannot be allocated: {}", arena.num_blocks,
         block_bytes, e.what());
  }
}

void ModelExecutor::copy_blocks(std::span<const BlockCopy> copies) {
  if (!copies.empty()) backend_->copy_blocks(kv_.front(), host_kv_, copies);
}

LaunchedStep ModelExecutor::launch(const ScheduledStep& step, const SamplingBatch& sampling, int top_logprobs,
                                   const std::function<void()>& before_sample, const DraftSampling* drafts) {
  TIDE_CHECK(!step.empty());
  LaunchedStep out;
  const Tensor logits = model_.forward(step.batch, kv_);
  if (before_sample) before_sample();
  const auto num_sampled = static_cast<int64_t>(step.sample_ids.size());
  const auto vocab = static_cast<size_t>(model_.config().vocab_size);
  // Prompt rows first: the sample op penalizes its rows in place, but only the rows to sample.
  if (!step.prompt_rows.empty()) {
    const Tensor rows = logits.slice_rows(num_sampled, logits.dim(0));
    std::vector<float> host(static_cast<size_t>(rows.numel()));
    backend_->download(rows, host.data());
    for (size_t r = 0; r < step.prompt_rows.size(); ++r) {
      out.prompt_logits.emplace_back(host.begin() + static_cast<std::ptrdiff_t>(r * vocab),
                                     host.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab));
    }
  }
  out.ids = backend_->alloc_uninitialized(DType::kI32, Shape{num_sampled});
  if (num_sampled == 0) return out;
  const Tensor sample_logits = logits.slice_rows(0, num_sampled);
  // The sample op penalizes the logits in place: logprobs read a copy of the model's.
  Tensor raw;
  if (top_logprobs >= 0) {
    raw = backend_->alloc_uninitialized(sample_logits.dtype, sample_logits.shape);
    backend_->copy(raw, sample_logits);
  }
  if (drafts != nullptr) {
    backend_->sample_with_drafts(out.ids, sample_logits, sampling, *drafts);
  } else {
    backend_->sample(out.ids, sample_logits, sampling);
  }
  if (top_logprobs < 0) return out;
  out.top_logprobs = top_logprobs;
  out.values = backend_->alloc_uninitialized(DType::kF32, Shape{num_sampled, 1 + top_logprobs});
  out.top_ids = backend_->alloc_uninitialized(DType::kI32, Shape{num_sampled, top_logprobs});
  backend_->logprobs(out.values, out.top_ids, raw, out.ids, top_logprobs);
  return out;
}

StepOutputs ModelExecutor::collect(LaunchedStep launched) {
  StepOutputs out;
  out.prompt_logits = std::move(launched.prompt_logits);
  out.sampled.resize(static_cast<size_t>(launched.ids.numel()));
  if (!out.sampled.empty()) backend_->download(launched.ids, out.sampled.data());
  if (launched.top_logprobs < 0 || out.sampled.empty()) return out;
  const auto width = static_cast<size_t>(launched.top_logprobs);
  std::vector<float> v(static_cast<size_t>(launched.values.numel()));
  std::vector<int32_t> t(static_cast<size_t>(launched.top_ids.numel()));
  backend_->download(launched.values, v.data());
  if (width > 0) backend_->download(launched.top_ids, t.data());
  out.logprobs.resize(out.sampled.size());
  for (size_t r = 0; r < out.logprobs.size(); ++r) {
    out.logprobs[r].id = out.sampled[r];
    out.logprobs[r].logprob = v[r * (1 + width)];
    for (size_t j = 0; j < width; ++j) out.logprobs[r].top.emplace_back(t[r * width + j], v[r * (1 + width) + 1 + j]);
  }
  return out;
}

}  // namespace tide
