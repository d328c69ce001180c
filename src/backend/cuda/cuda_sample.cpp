// CudaBackend's sample op (with and without drafts) and logprobs: the per-row arrays staged to the device in one
// copy, then one kernel launch (sampling.cu, logprobs.cu).
#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/tensor_args.h"

namespace tide {

using cuda::typed;

// out_ids: [R] i32, logits: [R, V] f32
void CudaBackend::sample(Tensor out_ids, Tensor logits, const SamplingBatch& batch) {
  sample_rows(out_ids, logits, batch, nullptr);
}

// The same, rows with a draft checking it (draft logits: [J, V] f32 in device memory)
void CudaBackend::sample_with_drafts(Tensor out_ids, Tensor logits, const SamplingBatch& batch,
                                     const DraftSampling& drafts) {
  sample_rows(out_ids, logits, batch, &drafts);
}

void CudaBackend::sample_rows(Tensor out_ids, Tensor logits, const SamplingBatch& batch, const DraftSampling* drafts) {
  float* l = typed<float>(logits, DType::kF32, "sample logits");
  int32_t* ids = typed<int32_t>(out_ids, DType::kI32, "sample ids");
  const int64_t num_rows = logits.dim(0), vocab = logits.dim(1);
  TIDE_CHECK(out_ids.numel() == num_rows);
  check_sampling_batch(batch, num_rows, vocab);
  if (drafts != nullptr) check_draft_sampling(*drafts, num_rows, vocab);
  if (num_rows == 0) return;

  // Staging layout: rows, history_starts, history, mask_index, then the drafts' rows, ids and index, then masks,
  // each 16-byte aligned.
  auto align = [](size_t n) { return (n + 15) / 16 * 16; };
  const size_t rows_bytes = align(batch.rows.size_bytes());
  const size_t starts_bytes = align(batch.history_starts.size_bytes());
  const size_t history_bytes = align(batch.history.size_bytes());
  const size_t index_bytes = align(batch.mask_index.size_bytes());
  const size_t drafts_at = rows_bytes + starts_bytes + history_bytes + index_bytes;
  const size_t draft_rows_bytes = drafts != nullptr ? align(drafts->rows.size_bytes()) : 0;
  const size_t draft_ids_bytes = drafts != nullptr ? align(drafts->ids.size_bytes()) : 0;
  const size_t draft_index_bytes = drafts != nullptr ? align(drafts->index.size_bytes()) : 0;
  const size_t masks_at = drafts_at + draft_rows_bytes + draft_ids_bytes + draft_index_bytes;
  const size_t bytes = masks_at + batch.masks.size_bytes();
  SampleSlot& slot = sample_slots_[sample_next_];
  sample_next_ = (sample_next_ + 1) % kSampleSlots;
  TIDE_CUDA_CHECK(cudaEventSynchronize(slot.staged));  // the slot's previous copy has left the staging
  if (bytes > slot.capacity) {
    TIDE_CUDA_CHECK(cudaStreamSynchronize(stream_));  // no queued kernel still reads the old device buffer
    cudaFreeHost(slot.staging);
    cudaFree(slot.device);
    slot.staging = slot.device = nullptr;
    slot.capacity = 0;
    const size_t capacity = std::max<size_t>(bytes * 2, 64 << 10);
    TIDE_CUDA_CHECK(cudaHostAlloc(&slot.staging, capacity, cudaHostAllocDefault));
    TIDE_CUDA_CHECK(cudaMalloc(&slot.device, capacity));
    slot.capacity = capacity;
  }
  auto* staging = static_cast<unsigned char*>(slot.staging);
  std::memcpy(staging, batch.rows.data(), batch.rows.size_bytes());
  if (!batch.history_starts.empty()) {
    std::memcpy(staging + rows_bytes, batch.history_starts.data(), batch.history_starts.size_bytes());
    if (!batch.history.empty()) {
      std::memcpy(staging + rows_bytes + starts_bytes, batch.history.data(), batch.history.size_bytes());
    }
  }
  if (!batch.mask_index.empty()) {
    std::memcpy(staging + rows_bytes + starts_bytes + history_bytes, batch.mask_index.data(),
                batch.mask_index.size_bytes());
    if (!batch.masks.empty()) std::memcpy(staging + masks_at, batch.masks.data(), batch.masks.size_bytes());
  }
  if (drafts != nullptr) {
    std::memcpy(staging + drafts_at, drafts->rows.data(), drafts->rows.size_bytes());
    std::memcpy(staging + drafts_at + draft_rows_bytes, drafts->ids.data(), drafts->ids.size_bytes());
    std::memcpy(staging + drafts_at + draft_rows_bytes + draft_ids_bytes, drafts->index.data(),
                drafts->index.size_bytes());
  }
  TIDE_CUDA_CHECK(cudaMemcpyAsync(slot.device, slot.staging, bytes, cudaMemcpyHostToDevice, stream_));
  TIDE_CUDA_CHECK(cudaEventRecord(slot.staged, stream_));

  auto* device = static_cast<unsigned char*>(slot.device);
  cuda::SampleParams p{};
  p.out_ids = ids;
  p.logits = l;
  p.rows = reinterpret_cast<const SamplingRow*>(device);
  p.history_starts = batch.history_starts.empty() ? nullptr : reinterpret_cast<const int32_t*>(device + rows_bytes);
  p.history = reinterpret_cast<const HistoryToken*>(device + rows_bytes + starts_bytes);
  p.mask_index = batch.mask_index.empty()
                     ? nullptr
                     : reinterpret_cast<const int32_t*>(device + rows_bytes + starts_bytes + history_bytes);
  p.masks = reinterpret_cast<const uint32_t*>(device + masks_at);
  if (drafts != nullptr) {
    p.draft_logits = typed<float>(drafts->logits, DType::kF32, "draft logits");
    p.draft_rows = reinterpret_cast<const SamplingRow*>(device + drafts_at);
    p.draft_ids = reinterpret_cast<const int32_t*>(device + drafts_at + draft_rows_bytes);
    p.draft_index = reinterpret_cast<const int32_t*>(device + drafts_at + draft_rows_bytes + draft_ids_bytes);
  }
  p.num_rows = num_rows;
  p.vocab = vocab;
  cuda::launch_sample(p, stream_);
}

// out_values: [R, 1 + n] f32, out_ids: [R, n] i32, logits: [R, V] f32, chosen_ids: [R] i32
void CudaBackend::logprobs(Tensor out_values, Tensor out_ids, const Tensor& logits, const Tensor& chosen_ids, int n) {
  static_assert(cuda::kLogprobsSlots == kMaxLogprobs);
  check_logprobs_args(out_values, out_ids, logits, chosen_ids, n);
  cuda::LogprobsParams p{};
  p.out_values = out_values.as<float>();
  p.out_ids = out_ids.as<int32_t>();
  p.logits = logits.as<float>();
  p.chosen_ids = chosen_ids.as<int32_t>();
  p.num_rows = logits.dim(0);
  p.vocab = logits.dim(1);
  p.n = n;
  cuda::launch_logprobs(p, stream_);
}

}  // namespace tide
