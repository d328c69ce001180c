#include "runtime/model_executor.h"

#include "core/error.h"

namespace tide {

ModelExecutor::ModelExecutor(const std::filesystem::path& model_dir, std::unique_ptr<Backend> backend,
                             const WeightLoadOptions& options)
    : backend_(std::move(backend)), model_(Cohere2Model::load(model_dir, *backend_, options)) {}

void ModelExecutor::allocate_kv(int64_t block_size, const KvArenaSpec& arena, KvCacheDtype dtype) {
  host_kv_ = backend_->alloc_host(DType::kU8, Shape{arena.num_host_blocks, model_.kv_block_bytes(block_size, dtype)});
  kv_ = model_.allocate_kv(block_size, arena.num_blocks, dtype);
}

void ModelExecutor::copy_blocks(std::span<const BlockCopy> copies) {
  if (!copies.empty()) backend_->copy_blocks(kv_.front(), host_kv_, copies);
}

StepOutputs ModelExecutor::execute(const ScheduledStep& step, const SamplingBatch& sampling, int top_logprobs) {
  TIDE_CHECK(!step.empty());
  StepOutputs out;
  const Tensor logits = model_.forward(step.batch, kv_);
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
  if (num_sampled == 0) return out;
  const Tensor sample_logits = logits.slice_rows(0, num_sampled);
  // The sample op penalizes the logits in place: logprobs read a copy of the model's.
  Tensor raw;
  if (top_logprobs >= 0) {
    raw = backend_->alloc_uninitialized(sample_logits.dtype, sample_logits.shape);
    backend_->copy(raw, sample_logits);
  }
  Tensor ids = backend_->alloc_uninitialized(DType::kI32, Shape{num_sampled});
  backend_->sample(ids, sample_logits, sampling);
  out.sampled.resize(static_cast<size_t>(num_sampled));
  backend_->download(ids, out.sampled.data());
  if (top_logprobs < 0) return out;
  const int n = top_logprobs;
  Tensor values = backend_->alloc_uninitialized(DType::kF32, Shape{num_sampled, 1 + n});
  Tensor top_ids = backend_->alloc_uninitialized(DType::kI32, Shape{num_sampled, n});
  backend_->logprobs(values, top_ids, raw, ids, n);
  std::vector<float> v(static_cast<size_t>(values.numel()));
  std::vector<int32_t> t(static_cast<size_t>(top_ids.numel()));
  backend_->download(values, v.data());
  if (n > 0) backend_->download(top_ids, t.data());
  const auto width = static_cast<size_t>(n);
  out.logprobs.resize(static_cast<size_t>(num_sampled));
  for (size_t r = 0; r < out.logprobs.size(); ++r) {
    out.logprobs[r].id = out.sampled[r];
    out.logprobs[r].logprob = v[r * (1 + width)];
    for (size_t j = 0; j < width; ++j) out.logprobs[r].top.emplace_back(t[r * width + j], v[r * (1 + width) + 1 + j]);
  }
  return out;
}

}  // namespace tide
