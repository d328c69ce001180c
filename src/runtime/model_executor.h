// ModelExecutor: runs the steps the scheduler plans on one backend. It owns the backend, the loaded model, the
// KV arena's device storage and its host tier, and executes a ScheduledStep: the block copies, the model's
// forward pass, the sample op (and logprobs) over the rows to sample, and the logits of prompt positions a
// request asked for, copied to the host. No scheduling and no request state: what to sample with comes in
// as a SamplingBatch. With speculative decoding by a draft model it also holds the draft (loaded on the same
// backend, with its own KV storage) and runs its steps (draft_step); what to draft is DraftProposer's.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "kv/kv_cache_manager.h"
#include "model/cohere2.h"
#include "runtime/generation.h"
#include "sched/scheduled_step.h"

namespace tide {

// A step queued on the device whose sampled ids are not back yet (ModelExecutor::launch).
struct LaunchedStep {
  Tensor ids;                                     // [rows to sample] i32, device memory
  Tensor values, top_ids;                         // logprobs, when asked for
  int top_logprobs = -1;
  std::vector<std::vector<float>> prompt_logits;  // already on the host
};

// What one step gives back.
struct StepOutputs {
  std::vector<int32_t> sampled;                   // [step.sample_ids.size()]
  std::vector<TokenLogprobs> logprobs;            // [step.sample_ids.size()] when top logprobs were asked for
  std::vector<std::vector<float>> prompt_logits;  // [step.prompt_rows.size()][vocab]
};

class ModelExecutor {
 public:
  // Loads DIR's model onto `backend`, and the draft model of `draft_dir` after it when that is not empty (the
  // same load options). Throws tide::Error; a draft whose vocabulary is not the model's is refused.
  ModelExecutor(const std::filesystem::path& model_dir, std::unique_ptr<Backend> backend,
                const WeightLoadOptions& options, const std::filesystem::path& draft_dir = {});

  Backend& backend() const { return *backend_; }
  const Cohere2Model& model() const { return model_; }
  Cohere2Model& model() { return model_; }
  // The draft model (speculative decoding), or null.
  const Cohere2Model* draft() const { return draft_.get(); }
  // Whether the model and the draft may replay recorded graphs (Cohere2Model::set_graphs_enabled).
  void set_graphs_enabled(bool enabled) {
    model_.set_graphs_enabled(enabled);
    if (draft_) draft_->set_graphs_enabled(enabled);
  }

  // Allocates the KV arena (device blocks) and its host tier (pinned slots of the same size).
  void allocate_kv(int64_t block_size, const KvArenaSpec& arena, KvCacheDtype dtype);
  // Allocates the draft model's KV storage: `num_blocks` blocks of its own (no host tier).
  void allocate_draft_kv(int64_t block_size, int32_t num_blocks, KvCacheDtype dtype);
  // The draft model's KV storage in the arena's blocks instead (after allocate_kv): block b of the draft is
  // arena block b, read as `num_layers` layer slots of `block_size` positions of the draft's KV heads (the
  // same bytes: engine.h's DraftArenaLayout). Block copies to and from the host tier move whole blocks, so
  // they serve both.
  void share_draft_kv(int64_t block_size, int64_t num_layers);
  // One step of the draft model over `batch` (its K/V written into the draft's storage; the token ids from
  // `token_ids` when given, in backend memory) and the id the sample op draws from each of its logit rows with
  // `rows` (temperature 0: the argmax) into `ids` ([rows] i32, backend memory); the logits are copied into `keep`
  // first when it is not empty ([rows, vocab] f32). Queued on the backend: nothing waits for the step, so a
  // next step can take `ids` as its token ids. Throws as execute does.
  void draft_step(const ForwardBatch& batch, std::span<const SamplingRow> rows, Tensor keep, Tensor ids,
                  const Tensor* token_ids = nullptr);
  // Runs block copies between the arena and its host tier, in order.
  void copy_blocks(std::span<const BlockCopy> copies);
  // Runs `step` (not empty; its copies ran before, copy_blocks): the forward pass, the sample op over its rows
  // to sample with `sampling` (one row each, in order), logprobs with `top_logprobs` alternatives when >= 0,
  // and copies the prompt rows' logits to the host. Throws OutOfMemoryError when the device has no memory for
  // the step, tide::Error on other failures; the KV cache then holds nothing of the step that matters (its
  // positions are computed again).
  StepOutputs execute(const ScheduledStep& step, const SamplingBatch& sampling, int top_logprobs) {
    return collect(launch(step, sampling, top_logprobs));
  }
  // execute() in two halves: launch() queues the step on the device and returns (the prompt rows' logits, when
  // asked for, are copied back at once); collect() waits for the sampled ids. The host may do other work in
  // between, while the device computes. Launch throws as execute does; collect only on a device fault.
  // `before_sample` runs once the forward pass is queued and before the sample op reads `sampling`: it may
  // finish writing what `sampling`'s views show (the allowed-token masks) while the device computes.
  // `drafts`, when given, are drafted tokens the rows check against the draft's distribution
  // (Backend::sample_with_drafts).
  LaunchedStep launch(const ScheduledStep& step, const SamplingBatch& sampling, int top_logprobs,
                      const std::function<void()>& before_sample = {}, const DraftSampling* drafts = nullptr);
  StepOutputs collect(LaunchedStep launched);

 private:
  std::unique_ptr<Backend> backend_;
  Cohere2Model model_;
  std::vector<KvStorage> kv_;  // one view of the arena per layer group
  Tensor host_kv_;             // the host tier: [host blocks, block bytes], host memory
  std::unique_ptr<Cohere2Model> draft_;  // speculative decoding's draft model, or null
  std::vector<KvStorage> draft_kv_;      // its KV storage, one view per layer group
};

}  // namespace tide
