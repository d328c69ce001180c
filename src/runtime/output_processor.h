// OutputProcessor: the engine loop's per-sample state beside the scheduler's requests, and what turns a step's
// results into SampleDeltas: the sample op's per-row inputs (parameters, seed and draw counter, the token
// list of penalties, bias and banned stop ids), the penalties' history, incremental detokenization with stop
// strings, logprobs and prompt logits, and the final delta of each finished sample. Used by the loop thread
// only; deltas are collected in an Outbox and delivered once the step lock is released.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/generation.h"
#include "runtime/model_executor.h"
#include "runtime/sampling.h"
#include "runtime/text_stream.h"
#include "sched/scheduler.h"
#include "spec/ngram_index.h"
#include "spec/speculative_config.h"
#include "tokenizer/tokenizer.h"

namespace tide {

// Deltas of one loop iteration, handed to the handles once the step lock is released.
class Outbox {
 public:
  // The delta of request `id` (sample `index` of `handle`) this iteration, created empty on first use.
  SampleDelta& of(RequestId id, const std::shared_ptr<RequestHandle>& handle, int index);
  // A delta of a sample the scheduler never took (refused when added).
  void push(const std::shared_ptr<RequestHandle>& handle, SampleDelta delta) { deltas_.emplace_back(handle, std::move(delta)); }
  void deliver();

 private:
  std::vector<std::pair<std::shared_ptr<RequestHandle>, SampleDelta>> deltas_;
  std::unordered_map<RequestId, size_t> index_;
};

class OutputProcessor {
 public:
  // A submitted request, shared by its samples.
  struct Live {
    std::shared_ptr<RequestHandle> handle;
    GenerateOptions options;
    std::string label;  // names the request in the log
  };

  // `vocab`: the model's vocabulary (the logits' width), which masks cover. `speculative`: the engine's
  // speculative decoding (with n-gram speculation, prompt lookup per sample), or null.
  OutputProcessor(const Tokenizer& tokenizer, int64_t vocab, const spec::SpeculativeConfig* speculative = nullptr)
      : tokenizer_(tokenizer), vocab_(vocab), speculative_(speculative) {}

  // Starts following sample `index` of `live`, scheduler request `id`, on `prompt`, drawing from `seed`.
  void add(RequestId id, std::shared_ptr<Live> live, int index, uint64_t seed, std::span<const int32_t> prompt);
  // The scheduler requests of `handle_id`'s unfinished samples; of every unfinished sample.
  std::vector<RequestId> requests_of(uint64_t handle_id) const;
  std::vector<RequestId> requests() const;
  size_t size() const { return samples_.size(); }
  // Whether sample `id` speculates: the engine does, the sample did not turn speculation off, has no thinking
  // budget (its rows depend on a count the drafts would have to advance), and its constraint, if any, can be
  // copied (TokenConstraint::clone).
  bool speculates(RequestId id) const;
  // Cuts request `r`'s draft before the first token its constraint refuses or that is one of its stop ids
  // (a stop ends the output; a refused token could never be kept). Nothing for an unconstrained sample.
  void constrain_draft(const Request& r, std::vector<int32_t>& draft) const;
  // Speculative decoding with a draft model: the row of sample `id`'s draft distribution q at draw `counter`
  // (its temperature, top-k, top-p and min-p; no penalties), in one of two streams of its own, independent of
  // the sample's: the draft's draw of the token, or the acceptance draw that checks it
  // (Backend::sample_with_drafts). Temperature 0 (a greedy sample, or `sampled` false): the draft's argmax.
  SamplingRow draft_row(RequestId id, uint64_t counter, bool acceptance, bool sampled) const;
  // Scheduler::Proposer for sample `id` with prompt lookup: up to `max_tokens` tokens drafted over its prompt
  // and output so far (none when it does not speculate).
  void propose(RequestId id, int64_t max_tokens, std::vector<int32_t>& draft) const;

  // The sample op's inputs for `step`'s rows to sample (views of buffers kept until the next call), and the
  // most top logprobs any of them asked for (-1: none). Constrained rows get their mask's place; its bits are
  // written by fill_masks(), which may run while the device computes the step's forward pass.
  SamplingBatch sampling_batch(const ScheduledStep& step, const Scheduler& scheduler, int& top_logprobs);
  // The allowed-token masks of the last sampling_batch()'s constrained rows (the batch's views see them).
  void fill_masks(const ScheduledStep& step);
  // Right after Scheduler::update(step): the new ids go into the penalties' history and the constraints' states,
  // so that the next step's sampling inputs see them; a constrained sample whose token its constraint refuses
  // ends with an error. `done`: requests the update finished (the scheduler no longer finds them).
  void record(const ScheduledStep& step, Scheduler& scheduler, const std::vector<std::unique_ptr<Request>>& done);
  // Then, possibly while the next step runs: the new ids of every sampled row (text, stop strings, logprobs)
  // and the prompt rows' logits into `out`. A stop string finishes its request in `scheduler` (in the step
  // in flight, if it is in one: that step's id for it is dropped). Samples that ended meanwhile are skipped.
  void on_step(const ScheduledStep& step, StepOutputs& outputs, Scheduler& scheduler,
               const std::vector<std::unique_ptr<Request>>& done, Outbox& out);
  // The final deltas of finished requests (text held back, finish reason, statistics); forgets them.
  // Requests that ended with an error are logged.
  void on_finished(const std::vector<std::unique_ptr<Request>>& done, Outbox& out);
  // Ends every sample with "error" and `error`, logged once; forgets them all.
  void fail_all(const std::string& error, Outbox& out);

 private:
  // One sample = one scheduler request.
  struct Sample {
    std::shared_ptr<Live> live;
    int index = 0;
    uint64_t seed = 0;     // draw k of the sample uses (seed, k), whatever else a batch holds
    TokenHistory history;  // for the penalties and logit_bias
    TextStream text;
    int64_t emitted = 0;   // output ids already in a delta
    int64_t recorded = 0;  // output ids already in the history
    // Tokens inside the thinking budget's span so far; -1 while outside it.
    int64_t span_tokens = -1;
    std::unique_ptr<TokenConstraint> constraint;  // structured outputs; null: unconstrained
    bool speculates = false;
    std::unique_ptr<spec::NgramIndex> ngram;      // prompt lookup over prompt and output (ngram speculation)
  };
  SampleDelta& delta(RequestId id, const Sample& s, Outbox& out) { return out.of(id, s.live->handle, s.index); }

  const Tokenizer& tokenizer_;
  std::unordered_map<RequestId, Sample> samples_;
  std::unordered_map<uint64_t, std::vector<RequestId>> by_handle_;  // live samples of each handle
  // The sample op's inputs, reused across steps.
  std::vector<SamplingRow> rows_;
  std::vector<int32_t> token_starts_;
  std::vector<HistoryToken> tokens_;
  std::vector<int32_t> mask_index_;  // per row: -1, or its mask in masks_
  // Per row: -1, or for row i >= 1 of a verify step the draft d_i the row's constraint state takes after row
  // i - 1's (fill_masks advances a copy of the sample's state).
  std::vector<int32_t> mask_draft_;
  std::vector<uint32_t> masks_;
  TokenHistory draft_history_;  // a verify row's history: the sample's and the drafts before the row
  int64_t vocab_ = 0;
  const spec::SpeculativeConfig* speculative_;
};

}  // namespace tide
