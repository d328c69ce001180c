// Speculative decoding's part of the engine's step loop (engine_loop.cpp): it wires the Scheduler's proposer
// (prompt lookup through the OutputProcessor, or the draft model through DraftProposer) and, for a draft in
// the model's arena, the reclaimer; runs the draft model's round before a step; hands the sample op the
// draft's distribution; and keeps speculation's counters across the schedulers a failed step replaces.
// Only the loop thread touches it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "runtime/draft_proposer.h"
#include "runtime/engine.h"
#include "runtime/output_processor.h"
#include "sched/scheduler.h"

namespace tide {

class Speculation {
 public:
  // `draft_kv`: the draft model's KV cache, or null (prompt lookup); `in_arena`: its blocks are the model's
  // arena's (draft_arena_layout), so it leaves the model's next step its blocks and gives its own back when
  // the model runs short.
  Speculation(ModelExecutor& executor, KvCacheManager* draft_kv, bool in_arena, const spec::SpeculativeConfig& config,
              int64_t max_step_tokens, int64_t max_chunk);

  // A new scheduler: its proposer (and reclaimer) are this one's.
  void attach(Scheduler& scheduler, OutputProcessor& outputs);
  // Before `scheduler` plans a step: the draft model drafts for every running request that decodes and
  // speculates (nothing while disable_by_batch_size requests run). A failure of the draft's step costs only
  // speculation: it is logged, and the next steps run without drafts for a while. Failed block copies of a
  // draft in the model's arena leave the arena's cache unknown: the error is returned, and every request must
  // end. `model_kv`: the model's cache (what the draft leaves free depends on its groups).
  std::optional<std::string> before_step(Scheduler& scheduler, OutputProcessor& outputs,
                                         const KvCacheManager& model_kv, EngineStats& stats);
  // The draft's distribution for the sample op's checks of `step`'s drafts, or null (ModelExecutor::launch).
  const DraftSampling* sampling(const ScheduledStep& step, const Scheduler& scheduler, OutputProcessor& outputs);
  // A finished request's draft sequence.
  void release(RequestId id);
  // `scheduler` is being replaced: its counters are kept, and the draft's sequences give their blocks back
  // (before a KV cache shared with the draft starts over).
  void retire(const Scheduler& scheduler);
  // EngineStats::spec_*: the retired schedulers' counters and `scheduler`'s.
  void add_counts(EngineStats& s, const Scheduler& scheduler) const;

 private:
  // Steps that run without drafts after the draft model's step failed.
  static constexpr int64_t kStepsWithoutDrafts = 64;

  const spec::SpeculativeConfig config_;
  const bool in_arena_;
  std::optional<DraftProposer> drafts_;  // speculative decoding with a draft model
  int64_t steps_without_drafts_ = 0;
  // Whether sampled requests' drafts are drawn from the draft's distribution and checked against it (the
  // backend's sample_with_drafts); else every draft is the draft's argmax, checked by equality.
  bool sampled_drafts_ = false;
  EngineStats past_;  // the counters of replaced schedulers (spec_* only)
};

}  // namespace tide
