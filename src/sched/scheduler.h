// Scheduler: continuous (in-flight) batching over the window-aware KV cache. Each step takes the decode
// token of every running request first, then prefill chunks of running and waiting requests in arrival
// order (FCFS), within a token budget, a sequence budget and a per-sequence chunk limit. Admission counts
// the reused prefix (cached tokens need no compute) and checks the arena before touching it. A chunk
// shrinks to the blocks that are free; when a running request cannot get a block for even one token, the
// newest running request is preempted by recompute (blocks freed, back to the front of the queue), and a
// step that preempted admits nobody.
//
// Why no deadlock and no starvation: running requests are always the oldest unfinished ones (admission is
// FCFS with head-of-line blocking, preemption takes the newest and puts it back at the front of the queue),
// so the oldest running request can always preempt everything else, and alone it fits (add() checked
// KvCacheManager::fits). If it still cannot progress, it finishes with an error instead of hanging.
//
// Speculative decoding: with a proposer set, a decoding request may compute drafted tokens after its newest id
// in the same step (a verify step: the chunk t, d_1 .. d_k, every position sampled); update() keeps the drafts
// up to the first whose row sampled another id, plus that row's id, and gives back the blocks of the rest.
//
// Engine loop (one thread): step = schedule(); run step.copies; forward(step.batch) when !step.empty();
// sample one id per step.sample_ids row; update(step, ids); take_finished(). Non-goals: sampling parameters,
// detokenization, threads, priorities other than arrival order.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "sched/request.h"
#include "sched/scheduled_step.h"

namespace tide {

struct SchedulerOptions {
  int64_t max_num_batched_tokens = 2048;  // tokens of one step, all sequences together
  int64_t max_num_seqs = 256;             // running requests at once (so sequences in one step)
  int64_t max_prefill_chunk = 512;        // tokens of one sequence in one step
  int64_t max_model_len = 0;              // longest prompt + max_tokens (the model's context); required

  // Throws tide::Error naming the option when a value is not positive.
  void validate() const;
};

class Scheduler {
 public:
  // Fills `draft` with up to `max_tokens` drafted tokens to follow a decoding request's newest id (left empty:
  // none this step).
  using Proposer = std::function<void(const Request& request, int64_t max_tokens, std::vector<int32_t>& draft)>;

  // `kv` must outlive the scheduler; the scheduler is its only user while requests are live.
  Scheduler(KvCacheManager& kv, SchedulerOptions options);
  // Gives the blocks of every live request back to `kv`.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  const SchedulerOptions& options() const { return options_; }
  // Turns speculation on (`propose` asked for at most `max_draft` tokens per decoding request and step) or off
  // (null). With `disable_by_batch_size` > 0, a step speculates only while fewer than that many requests run
  // when it is planned (a large batch is better served by plain decodes). Not while a step is in flight.
  void set_proposer(Proposer propose, int64_t max_draft, int64_t disable_by_batch_size = 0);
  // `reclaim` gives back blocks another user of the arena holds (a draft model's cache in the model's arena)
  // and returns whether it did; the scheduler calls it when the arena is short, before preempting anyone
  // or letting an admission wait. Null: nobody to ask. Not while a step is in flight.
  void set_reclaimer(std::function<bool()> reclaim);
  // Whether the next schedule() may ask the proposer for drafts (a proposer is set and the running requests
  // are fewer than disable_by_batch_size).
  bool speculates() const;
  const KvCacheManager& kv() const { return kv_; }

  // Queues a request (status waiting) and returns its id (increasing in arrival order). Throws tide::Error,
  // queueing nothing, when it can never run: empty prompt, max_tokens < 0, prompt + max_tokens beyond
  // max_model_len, or more blocks than the arena holds (!kv.fits). max_tokens 0 finishes at once ("length"),
  // unless the request asks for prompt logits: then once its prompt is computed.
  RequestId add(RequestParams params);
  // Finishes request `id` with `reason` (abort, or stop found by the engine, e.g. a stop string; `error` says
  // why for kError); its blocks go back. While a step is in flight, a request in it finishes in update() or
  // retract() (its blocks are being read). Returns false when `id` is unknown or already finished.
  bool finish(RequestId id, FinishReason reason, std::string error = {});
  bool abort(RequestId id) { return finish(id, FinishReason::kAbort); }

  // Plans the next step: appends blocks for every scheduled token, admits waiting requests, preempts when
  // the arena runs out, and takes the block copies. Each call must be followed by update() before the next.
  ScheduledStep schedule();
  // Records that `step` ran: commits its tokens' K/V, appends sampled_ids[i] (row i, for
  // step.sample_ids[i]) to its request, and finishes requests that hit a stop id or max_tokens (or whose
  // finish was asked for during the step), freeing their blocks. Throws tide::Error on a count mismatch.
  void update(const ScheduledStep& step, std::span<const int32_t> sampled_ids);
  // Records that `step` did not run (its forward or sampling failed; its block copies did run): every
  // request in it is back where it was before schedule(), holding only the blocks of its computed tokens
  // (an admission keeps its reused prefix and stays running), and finishes asked for during the step apply.
  void retract(const ScheduledStep& step);
  // Preempts the newest running request (blocks freed, recomputed later). Returns false when none runs. Not
  // while a step is in flight.
  bool preempt_newest();
  // Caps the tokens of the steps schedule() plans (0: max_num_batched_tokens alone) and the requests
  // admission lets run (0: max_num_seqs alone); the engine lowers them while the device has no memory for
  // larger steps. Requests already running beyond the cap stay (preempt_newest() removes them).
  void limit_step_tokens(int64_t max_tokens) { step_token_limit_ = max_tokens; }
  void limit_running(int64_t max_running) { running_limit_ = max_running; }
  int64_t step_token_limit() const { return step_token_limit_; }
  int64_t running_limit() const { return running_limit_; }
  // Requests finished since the last call (any reason), in the order they finished; the scheduler forgets
  // them.
  std::vector<std::unique_ptr<Request>> take_finished();

  // The live (unfinished) request `id`, or null. The pointer stays valid until it finishes.
  const Request* find(RequestId id) const;
  // The running requests, in arrival order.
  std::vector<const Request*> running_requests() const { return {running_.begin(), running_.end()}; }
  size_t num_waiting() const { return waiting_.size(); }  // waiting and preempted
  size_t num_running() const { return running_.size(); }
  bool has_unfinished() const { return !requests_.empty(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  // Speculative decoding so far: drafted tokens computed in verify steps, those accepted, and verify steps of
  // one request (a request's chunk of drafts counts once).
  int64_t num_draft_tokens() const { return num_draft_tokens_; }
  int64_t num_accepted_tokens() const { return num_accepted_tokens_; }
  int64_t num_verifies() const { return num_verifies_; }
  // Per draft position i (0: the first drafted token of a verify step): drafts verified there and those
  // accepted (the target agreed with it and every draft before it). Sized by set_proposer's max_draft.
  const std::vector<int64_t>& drafted_per_position() const { return drafted_per_position_; }
  const std::vector<int64_t>& accepted_per_position() const { return accepted_per_position_; }
  // SequenceKv of every live request, for KvCacheManager::check_invariants.
  std::vector<const SequenceKv*> live_sequences() const;

 private:
  struct Planned {
    Request* request;
    int64_t num_tokens;
  };
  struct Plan {
    std::vector<Planned> entries;
    int64_t token_budget = 0;
    bool preempted = false;  // someone was preempted this step: the arena is full, admit nobody
    int64_t max_draft = 0;   // drafted tokens per decoding request this step
  };

  // Gives running request `r` blocks for up to `want` tokens (fewer when that is what fits), preempting
  // newer running requests when not even one token fits. Returns the tokens planned; 0 when `r` itself was
  // preempted or failed.
  int64_t reserve(Request& r, int64_t want, Plan& plan);
  // Admits waiting requests from the front of the queue while budgets and blocks allow, each with a first
  // chunk of at most `chunk` tokens.
  void admit_waiting(Plan& plan, int64_t chunk);
  // Frees the newest running request's blocks and puts it back at the front of the queue.
  void preempt_newest(Plan& plan);
  // Removes `r` from the queues, frees its blocks, and hands it to finished_.
  void finish_now(Request& r, FinishReason reason, std::string error = {});
  // Plans decoding request `r`: its newest id and, with a proposer, the drafted tokens after it that the token
  // budget, the blocks, max_tokens and max_model_len leave room for.
  void reserve_decode(Request& r, Plan& plan);
  // Appends `id`, sampled for `r`, and marks a finish it causes (a stop id after min_tokens, max_tokens).
  // Returns false when `r` is done.
  bool append_sampled(Request& r, int32_t id);

  KvCacheManager& kv_;
  SchedulerOptions options_;
  int64_t chunk_;  // the longest chunk any step computes: min(max_prefill_chunk, max_num_batched_tokens)
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;  // live requests
  std::deque<Request*> waiting_;  // in arrival order (preempted ones are older than the rest)
  std::vector<Request*> running_;  // in arrival order; all older than every waiting request
  std::vector<std::unique_ptr<Request>> finished_;
  RequestId next_id_ = 1;
  int64_t next_step_id_ = 0;
  bool in_flight_ = false;
  int64_t num_preemptions_ = 0;
  int64_t step_token_limit_ = 0;
  int64_t running_limit_ = 0;
  Proposer proposer_;
  int64_t max_draft_ = 0;
  int64_t disable_by_batch_size_ = 0;
  std::function<bool()> reclaim_;
  int64_t num_draft_tokens_ = 0;
  int64_t num_accepted_tokens_ = 0;
  int64_t num_verifies_ = 0;
  std::vector<int64_t> drafted_per_position_;
  std::vector<int64_t> accepted_per_position_;
};

}  // namespace tide
