// DraftProposer: speculative decoding's drafts from a draft model (docs/design/speculative-decoding.md). Before
// each engine step it runs the draft model over the decoding requests that speculate, batched: one step that
// brings each sequence's draft KV cache up to its newest id (usually the one or two tokens the last verify step
// accepted beyond what the draft had computed; a whole prompt the first time, in chunks) and samples the first
// drafted token, then one-token steps for the rest. The drafts wait here until the scheduler asks for them.
//
// The draft's KV cache is its own KvCacheManager over its own blocks, kept per request across steps: positions
// written for drafted tokens stay appended but uncommitted until the next round sees which of them the request
// accepted (those are committed, the rest truncated), exactly as the scheduler treats the model's own cache.
// The draft never holds a request back: a sequence the draft has no blocks for, or one past the draft's
// maximum length, simply gets no draft; a request that stops speculating (finished, preempted, no longer
// decoding) gives its draft blocks back.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache_manager.h"
#include "runtime/model_executor.h"
#include "sched/request.h"
#include "sched/scheduled_step.h"
#include "sched/scheduler.h"

namespace tide {

// The block copies a draft round's allocations made in a shared arena (evictions to the host tier, hits
// copied back) failed: what the arena's cached blocks and host slots hold is unknown, for the model too.
class DraftCopyError : public Error {
 public:
  explicit DraftCopyError(const std::string& message) : Error(message) {}
};

// A decoding request that may speculate this step.
struct DraftRequest {
  RequestId id = 0;
  std::span<const int32_t> tokens;  // the prompt and the ids generated so far (the newest not yet computed)
  int64_t max_drafts = 0;           // tokens worth drafting (>= 1)
  // How draft i is drawn: temperature 0, the draft's argmax; else from the draft's distribution under the
  // row's temperature and filters (no penalties), with (row.seed, row.counter + i).
  SamplingRow row;
};

class DraftProposer {
 public:
  // `kv` manages the draft's blocks (ModelExecutor::allocate_draft_kv's); both must outlive the proposer.
  // Steps of the draft bring at most `max_step_tokens` tokens, at most `max_chunk` of one sequence.
  DraftProposer(ModelExecutor& executor, KvCacheManager& kv, int64_t max_step_tokens, int64_t max_chunk);
  ~DraftProposer() { release_all(); }
  DraftProposer(const DraftProposer&) = delete;
  DraftProposer& operator=(const DraftProposer&) = delete;

  // Drafts for `requests` (distinct ids) and keeps the drafts for take(); requests of earlier rounds that
  // are not among them give their draft blocks back. Throws what the draft model's step throws; the draft
  // cache is then released entirely (its contents are unknown) and no request has a draft. When the draft's
  // cache shares the model's arena, the block copies its allocations need run first (DraftCopyError when
  // they fail).
  void run(std::span<const DraftRequest> requests);
  // Blocks the draft's appends leave free in its arena (a shared arena: what the model's next step may
  // need), 0 by default.
  void set_keep_free(int64_t blocks) { keep_free_ = blocks; }
  // Gives back the blocks of the sequence holding the most (it computes its draft cache again when it next
  // drafts); this round's drafts stay. For the model's scheduler when the shared arena is short, before it
  // preempts anyone. Returns false when no sequence holds blocks.
  bool reclaim();
  // A round without drafts (the step does not speculate): the drafts and logits of the last run() are dropped;
  // every sequence keeps its draft blocks and catches up on the tokens it missed at the next run().
  void skip_round();
  // The draft run() made for `id`, at most `max_tokens` of it, into `draft` (left empty when there is none).
  void take(RequestId id, int64_t max_tokens, std::vector<int32_t>& draft) const;
  // What the rows of `step` (scheduled after run(), with the scheduler's drafts taken from here) check against
  // the draft's distribution (Backend::sample_with_drafts): row i of a verify step checks draft i when it was
  // drawn at a temperature, with the acceptance draw `acceptance_row(request, its draw counter)`. Null when
  // no row does. Valid until the next run().
  const DraftSampling* sampling(const ScheduledStep& step, const Scheduler& scheduler,
                                const std::function<SamplingRow(RequestId, uint64_t)>& acceptance_row);
  // Gives request `id`'s draft blocks back (it finished); nothing when it has none.
  void release(RequestId id);
  // Gives every request's draft blocks back (the engine's requests start over).
  void release_all();

  const KvCacheManager& kv() const { return kv_; }
  // The SequenceKv of every sequence holding draft blocks, for KvCacheManager::check_invariants; request
  // `id`'s (null when it has none).
  std::vector<const SequenceKv*> live_sequences() const;
  const SequenceKv* sequence(RequestId id) const;
  // Sequences whose blocks reclaim() gave back so far.
  int64_t num_reclaims() const { return num_reclaims_; }
  // Draft-model steps run so far, and the tokens they computed.
  int64_t num_steps() const { return num_steps_; }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  struct Sequence {
    SequenceKv kv;
    bool admitted = false;
    // Tokens written at positions kv.num_computed() .. after the last round, not yet committed: the tokens
    // the draft caught up on, then the drafted tokens it computed (all but the last drafted).
    std::vector<int32_t> pending;
    std::vector<int32_t> draft;  // this round's drafted tokens
    std::vector<int32_t> logits_rows;  // their rows in logits_ (drawn at a temperature only)
  };
  // Commits the pending tokens that `tokens` confirms (a common prefix), gives back the blocks of the rest.
  void sync(Sequence& s, std::span<const int32_t> tokens);
  void drop(Sequence& s);
  // One draft step sampling into `ids` (token ids from `token_ids` when given); `keep`: its logits go to the next
  // rows of logits_. Returns the first of those rows.
  int64_t step(const ForwardBatch& batch, std::span<const SamplingRow> rows, bool keep, Tensor ids,
               const Tensor* token_ids);

  ModelExecutor& executor_;
  KvCacheManager& kv_;
  int64_t max_step_tokens_;
  int64_t max_chunk_;
  int64_t max_positions_;  // the draft's maximum length
  int64_t keep_free_ = 0;
  std::unordered_map<RequestId, Sequence> seqs_;
  Tensor logits_;                  // this round's draft logits, when some draft was drawn at a temperature
  int64_t logits_used_ = 0;        // rows of logits_ filled so far this round
  std::vector<SamplingRow> rows_;  // a draft step's sampling rows
  // sampling()'s result, over its buffers: per row of logits_, the acceptance row and the drafted id; per
  // row of the step, its row of logits_ or -1.
  DraftSampling sampling_;
  std::vector<SamplingRow> check_rows_;
  std::vector<int32_t> check_ids_;
  std::vector<int32_t> check_index_;
  int64_t num_steps_ = 0;
  int64_t num_tokens_ = 0;
  int64_t num_reclaims_ = 0;
};

}  // namespace tide
