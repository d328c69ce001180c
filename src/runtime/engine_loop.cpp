// Engine's step loop (engine.h): the thread that owns the Scheduler, turns submissions into scheduler requests
// (one per sample), runs each step on the ModelExecutor, hands the results to the OutputProcessor, and
// decides what a failed step means: out of device memory, the step is taken back and smaller steps (or fewer
// requests at once) follow; a row the sample op would refuse ends its own request before the step runs; another
// fault is retried once, then the requests failing together run fewer at once until the failing one runs
// alone and ends with the error, logged. Submissions reach it through the Inbox (engine_inbox.h).
#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"
#include "runtime/engine.h"
#include "runtime/engine_inbox.h"
#include "runtime/engine_speculation.h"
#include "runtime/output_processor.h"
#include "sched/scheduler.h"

namespace tide {

// ---  the step loop

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

// The loop thread's state: the scheduler and the output processor. Only the loop thread touches it.
class Engine::Loop {
 public:
  explicit Loop(Engine& engine)
      : engine_(engine),
        outputs_(engine.tokenizer_, engine.config().vocab_size,
                 engine.options_.speculative ? &*engine.options_.speculative : nullptr) {
    const EngineOptions& o = engine.options_;
    if (o.speculative) {
      speculation_.emplace(engine.executor_, engine.draft_kv_manager_ ? &*engine.draft_kv_manager_ : nullptr,
                           engine.draft_layout_.has_value(), *o.speculative, o.max_num_batched_tokens,
                           o.max_prefill_chunk);
    }
    reset_scheduler();
  }

  void run() {
    engine_.executor_.backend().bind_thread();
    Inbox& inbox = *engine_.inbox_;
    while (true) {
      std::vector<Submission> submissions;
      std::vector<uint64_t> cancels;
      bool stop = false;
      {
        std::unique_lock lock(inbox.mutex);
        inbox.wake.wait(lock, [&] {
          return inbox.stop || !inbox.submissions.empty() || !inbox.cancels.empty() || scheduler_->has_unfinished();
        });
        submissions.swap(inbox.submissions);
        cancels.swap(inbox.cancels);
        stop = inbox.stop;
      }
      Outbox out;
      bool stepped = false;
      {
        std::lock_guard step_lock(engine_.step_mutex_);
        // A cancel or a stop ends requests at once: the results of the step before come first.
        if (!cancels.empty() || stop) flush_previous(out);
        for (Submission& s : submissions) start(std::move(s), out);
        for (uint64_t handle : cancels) cancel(handle);
        if (stop) {
          for (RequestId id : outputs_.requests()) scheduler_->abort(id);
        }
        finish(scheduler_->take_finished(), out);
        stepped = !stop && scheduler_->has_unfinished();
        if (stepped) {
          const Clock::time_point stepping = Clock::now();
          step(out);
          engine_.stats_.step_seconds += seconds_since(stepping);
        }
        // Nothing left to compute beside them: the last step's results go out now.
        if (!scheduler_->has_unfinished()) flush_previous(out);
      }
      const Clock::time_point delivering = Clock::now();
      out.deliver();
      if (stepped) {
        std::lock_guard step_lock(engine_.step_mutex_);
        engine_.stats_.output_seconds += seconds_since(delivering);
      }
      if (stop) return;
    }
  }

  // Under the step lock.
  size_t num_running() const { return scheduler_->num_running(); }
  size_t num_waiting() const { return scheduler_->num_waiting(); }
  int64_t num_preemptions() const { return past_preemptions_ + scheduler_->num_preemptions(); }
  // Speculative decoding's counters (EngineStats::spec_*), also of schedulers replaced after a failed step.
  void add_spec_counts(EngineStats& s) const {
    if (speculation_) speculation_->add_counts(s, *scheduler_);
  }

 private:
  // Successful steps after which limits set for device memory are doubled (until they are lifted).
  static constexpr int64_t kStepsBeforeRelaxing = 64;

  // A new scheduler (the old one gives every request's blocks back first); `forget_cache`: a new KV cache too,
  // its prefix cache empty.
  void reset_scheduler(bool forget_cache = false) {
    if (scheduler_) {
      past_preemptions_ += scheduler_->num_preemptions();
      if (speculation_) speculation_->retire(*scheduler_);
    }
    scheduler_.reset();
    strikes_.clear();  // a new scheduler numbers its requests anew
    if (forget_cache) engine_.reset_kv_cache();
    const EngineOptions& o = engine_.options_;
    scheduler_ = std::make_unique<Scheduler>(
        engine_.kv_manager_, SchedulerOptions{o.max_num_batched_tokens, o.max_num_seqs, o.max_prefill_chunk,
                                              engine_.max_model_len()});
    if (speculation_) speculation_->attach(*scheduler_, outputs_);
  }

  void start(Submission&& submission, Outbox& out) {
    const GenerateOptions& o = submission.options;
    auto live = std::make_shared<OutputProcessor::Live>(OutputProcessor::Live{
        submission.handle, o, o.request_id.empty() ? fmt::format("#{}", submission.handle->id()) : o.request_id});
    std::random_device device;
    const uint64_t seed = o.sampling.seed ? *o.sampling.seed : (uint64_t{device()} << 32 | device());
    RequestId leader = 0;
    for (int i = 0; i < o.n; ++i) {
      RequestParams params;
      params.prompt = submission.prompt;
      params.max_tokens = o.max_tokens;
      params.min_tokens = o.min_tokens;
      if (!o.ignore_eos) params.stop_ids = engine_.stop_ids_;
      params.stop_ids.insert(params.stop_ids.end(), o.stop_token_ids.begin(), o.stop_token_ids.end());
      params.prompt_logits = submission.prompt_logits;
      // Samples after the first compute the prompt once, in the first one's blocks (prefix caching).
      if (engine_.options_.enable_prefix_caching) params.prompt_leader = leader;
      RequestId id = 0;
      try {
        id = scheduler_->add(std::move(params));
      } catch (const Error& e) {  // submit() checked the same: only a bug gets here
        SampleDelta d;
        d.index = i;
        d.finish_reason = FinishReason::kError;
        d.error = e.what();
        log_info("request {} (sample {}) refused by the scheduler: {}", live->label, i, d.error);
        out.push(live->handle, std::move(d));
        continue;
      }
      if (i == 0) leader = id;
      outputs_.add(id, live, i, seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull, submission.prompt);
    }
  }

  void cancel(uint64_t handle) {
    for (RequestId id : outputs_.requests_of(handle)) scheduler_->abort(id);
  }

  // One step: plan, block copies, queue forward and sampling on the device; while it computes, the previous
  // step's results become deltas (handed out at once); then its sampled ids are committed, and its own results
  // wait for the next step to be processed (or for flush_previous when nothing else runs).
  void step(Outbox& out) {
    if (speculation_) {
      if (std::optional<std::string> error = speculation_->before_step(*scheduler_, outputs_, engine_.kv_manager_,
                                                                      engine_.stats_)) {
        fail_all(*error, out);
        return;
      }
    }
    const Clock::time_point planning = Clock::now();
    ScheduledStep step;
    try {
      step = scheduler_->schedule();
    } catch (const std::exception& e) {  // the scheduler's state is broken: start over
      fail_all(fmt::format("the scheduler failed: {}", e.what()), out);
      return;
    }
    try {
      engine_.executor_.copy_blocks(step.copies);
    } catch (const std::exception& e) {
      // What the cached blocks hold is unknown now: every request ends, and the prefix cache starts empty.
      fail_all(fmt::format("the KV cache's block copies failed: {}", e.what()), out);
      return;
    }
    EngineStats& stats = engine_.stats_;
    const Clock::time_point executing = Clock::now();
    stats.schedule_seconds += std::chrono::duration<double>(executing - planning).count();
    StepOutputs outputs;
    if (step.empty()) {
      // The scheduler makes progress or finishes requests with an error; a long run of empty steps is a bug.
      TIDE_CHECK(++idle_steps_ < 1000);
      flush_previous(out);
    } else {
      idle_steps_ = 0;
      const char* phase = "launch";
      std::vector<std::pair<RequestId, std::string>> refused;
      try {
        int top_logprobs = -1;
        const SamplingBatch sampling = outputs_.sampling_batch(step, *scheduler_, top_logprobs);
        refused = refused_rows(step, sampling);
        if (!refused.empty()) throw RefusedRows{};
        const DraftSampling* drafts = speculation_ ? speculation_->sampling(step, *scheduler_, outputs_) : nullptr;
        // Constrained rows' masks are computed while the device runs the forward pass.
        LaunchedStep launched =
            engine_.executor_.launch(step, sampling, top_logprobs, [&] { outputs_.fill_masks(step); }, drafts);
        const Clock::time_point overlapping = Clock::now();
        flush_previous(out);
        const Clock::time_point delivering = Clock::now();
        out.deliver();
        stats.output_seconds += seconds_since(delivering);
        stats.execute_seconds -= seconds_since(overlapping);  // output time, while the device computes
        phase = "collect";
        outputs = engine_.executor_.collect(std::move(launched));
      } catch (const OutOfMemoryError& e) {
        retracted(step, out);
        on_out_of_memory(step, e.what());
        finish(scheduler_->take_finished(), out);
        return;
      } catch (const RefusedRows&) {
        // Rows the sample op would refuse: their requests end, the step is planned again without them.
        retracted(step, out);
        for (const auto& [id, error] : refused) scheduler_->finish(id, FinishReason::kError, error);
        finish(scheduler_->take_finished(), out);
        return;
      } catch (const std::exception& e) {
        retracted(step, out);
        on_fault(step, phase, e.what(), out);
        return;
      }
      if (!strikes_.empty()) {
        for (const ScheduledSequence& s : step.seqs) strikes_.erase(s.request_id);
      }
    }
    const Clock::time_point committing = Clock::now();
    stats.execute_seconds += std::chrono::duration<double>(committing - executing).count();
    const int64_t drafted = scheduler_->num_draft_tokens(), accepted = scheduler_->num_accepted_tokens();
    scheduler_->update(step, outputs.sampled);
    // Rows of rejected drafts sampled tokens that were not kept.
    stats.generation_tokens -=
        (scheduler_->num_draft_tokens() - drafted) - (scheduler_->num_accepted_tokens() - accepted);
    count(step);
    Processed done{std::move(step), std::move(outputs), scheduler_->take_finished()};
    outputs_.record(done.step, *scheduler_, done.done);
    previous_ = std::move(done);
    stats.output_seconds += seconds_since(committing);
  }

  // The previous step's results (text, stop strings, logprobs, prompt logits) and the final deltas of the
  // requests it finished.
  void flush_previous(Outbox& out) {
    if (!previous_) return;
    const Clock::time_point processing = Clock::now();
    Processed& p = *previous_;
    outputs_.on_step(p.step, p.outputs, *scheduler_, p.done, out);
    for (std::unique_ptr<Request>& r : scheduler_->take_finished()) p.done.push_back(std::move(r));
    finish(p.done, out);
    if (!p.step.empty()) relax_limits();
    previous_.reset();
    engine_.stats_.output_seconds += seconds_since(processing);
  }

  // `step` did not run: it is taken back, and the previous step's results are processed now.
  void retracted(const ScheduledStep& step, Outbox& out) {
    scheduler_->retract(step);
    flush_previous(out);
  }

  void count(const ScheduledStep& step) {
    EngineStats& stats = engine_.stats_;
    stats.num_steps += step.empty() ? 0 : 1;
    stats.generation_tokens += static_cast<int64_t>(step.sample_ids.size());
    for (const ScheduledSequence& seq : step.seqs) {
      // The prompt part of what the sequence computed (a preempted request recomputes it).
      stats.prompt_tokens +=
          std::max<int64_t>(0, std::min(seq.start_pos + seq.num_tokens, seq.num_prompt_tokens) - seq.start_pos);
    }
  }

  // The device had no memory for `step` (taken back): steps with prefill chunks get a smaller token budget;
  // a step of decodes alone gets fewer requests at once, the newest preempted; a single token that does not
  // fit ends its request with the error.
  void on_out_of_memory(const ScheduledStep& step, const std::string& error) {
    steps_since_oom_ = 0;
    const int64_t tokens = step.num_tokens(), seqs = static_cast<int64_t>(step.seqs.size());
    if (tokens > seqs) {
      scheduler_->limit_step_tokens(std::max<int64_t>(1, tokens / 2));
      log_info("a step of {} tokens ({} requests) found no device memory ({}); steps take at most {} tokens for now",
               tokens, seqs, error, tokens / 2);
    } else if (seqs > 1) {
      const int64_t keep = seqs / 2;
      scheduler_->limit_running(keep);
      int64_t preempted = 0;
      while (static_cast<int64_t>(scheduler_->num_running()) > keep && scheduler_->preempt_newest()) ++preempted;
      log_info("a decode step of {} requests found no device memory ({}); {} preempted, at most {} run at once for now",
               seqs, error, preempted, keep);
    } else {
      for (const ScheduledSequence& s : step.seqs) {
        scheduler_->finish(s.request_id, FinishReason::kError,
                           fmt::format("the device has no memory for one token of this request: {}", error));
      }
    }
  }

  // Thrown inside step() when refused_rows() found rows the sample op would refuse.
  struct RefusedRows {};

  // The requests of `step` whose sampling rows the sample op would refuse (backend.h, check_sampling_row),
  // each with its error. Only a bug (in tide, or a model's stop ids outside its vocabulary) gets a row past
  // submit()'s checks; it is caught here so that the op does not fail every row of the step.
  std::vector<std::pair<RequestId, std::string>> refused_rows(const ScheduledStep& step, const SamplingBatch& batch) {
    std::vector<std::pair<RequestId, std::string>> refused;
    const int64_t vocab = engine_.config().vocab_size;
    for (size_t r = 0; r < batch.rows.size(); ++r) {
      std::span<const HistoryToken> history;
      if (!batch.history_starts.empty()) {
        const auto begin = static_cast<size_t>(batch.history_starts[r]);
        history = batch.history.subspan(begin, static_cast<size_t>(batch.history_starts[r + 1]) - begin);
      }
      try {
        check_sampling_row(batch.rows[r], history, vocab);
      } catch (const Error& e) {
        refused.emplace_back(step.sample_ids[r], fmt::format("the sample op would refuse this request's row: {}", e.what()));
      }
    }
    return refused;
  }

  // `step` (taken back) failed with `error`, not for memory. A step whose requests had not failed before is
  // retried as it is. Failing again: a single request ends with the error; several run fewer at once (half,
  // the newest preempted), so that the request that fails runs alone at last and the others finish.
  void on_fault(const ScheduledStep& step, const char* phase, const std::string& error, Outbox& out) {
    bool again = false;
    for (const ScheduledSequence& s : step.seqs) again = ++strikes_[s.request_id] > 1 || again;
    const int64_t tokens = step.num_tokens(), seqs = static_cast<int64_t>(step.seqs.size());
    if (!again) {
      log_info("a step of {} tokens over {} requests failed ({}): {}; retrying it", tokens, seqs, phase, error);
    } else if (seqs == 1) {
      log_info("a step of {} tokens of one request failed again ({}): {}; the request ends", tokens, phase, error);
      scheduler_->finish(step.seqs.front().request_id, FinishReason::kError,
                         fmt::format("the engine step failed: {}", error));
      finish(scheduler_->take_finished(), out);
    } else {
      const int64_t keep = seqs / 2;
      scheduler_->limit_running(keep);
      steps_since_oom_ = 0;  // relax_limits lifts the limit after a run of good steps
      int64_t preempted = 0;
      while (static_cast<int64_t>(scheduler_->num_running()) > keep && scheduler_->preempt_newest()) ++preempted;
      log_info("a step of {} tokens over {} requests failed again ({}): {}; {} preempted, at most {} run at once "
               "until the failing request runs alone", tokens, seqs, phase, error, preempted, keep);
    }
  }

  // Doubles the limits set for device memory (or to isolate a failing request) after a run of successful
  // steps; lifts them past the options.
  void relax_limits() {
    if (scheduler_->step_token_limit() == 0 && scheduler_->running_limit() == 0) return;
    if (++steps_since_oom_ < kStepsBeforeRelaxing) return;
    steps_since_oom_ = 0;
    const EngineOptions& o = engine_.options_;
    auto doubled = [](int64_t limit, int64_t most) { return limit == 0 || 2 * limit >= most ? 0 : 2 * limit; };
    scheduler_->limit_step_tokens(doubled(scheduler_->step_token_limit(), o.max_num_batched_tokens));
    scheduler_->limit_running(doubled(scheduler_->running_limit(), o.max_num_seqs));
    if (scheduler_->step_token_limit() == 0 && scheduler_->running_limit() == 0) {
      log_info("steps are back to their configured size after {} steps without running out of device memory "
               "or failing", kStepsBeforeRelaxing);
    }
  }

  void finish(const std::vector<std::unique_ptr<Request>>& done, Outbox& out) {
    engine_.stats_.num_requests_finished += static_cast<int64_t>(done.size());
    if (!strikes_.empty()) {
      for (const std::unique_ptr<Request>& r : done) strikes_.erase(r->id);
    }
    if (speculation_) {
      for (const std::unique_ptr<Request>& r : done) speculation_->release(r->id);
    }
    outputs_.on_finished(done, out);
  }

  // Every request ends with `error`; the scheduler and the KV cache start over, the prefix cache empty.
  void fail_all(const std::string& error, Outbox& out) {
    flush_previous(out);
    engine_.stats_.num_requests_finished += static_cast<int64_t>(outputs_.size());
    outputs_.fail_all(error, out);
    reset_scheduler(/*forget_cache=*/true);
  }

  // A step committed in the scheduler whose results are not processed yet.
  struct Processed {
    ScheduledStep step;
    StepOutputs outputs;
    std::vector<std::unique_ptr<Request>> done;  // the requests its update finished
  };

  Engine& engine_;
  OutputProcessor outputs_;
  std::optional<Speculation> speculation_;  // when options.speculative is set
  std::unique_ptr<Scheduler> scheduler_;
  std::optional<Processed> previous_;
  int64_t idle_steps_ = 0;
  int64_t past_preemptions_ = 0;  // of schedulers replaced after a failed step
  int64_t steps_since_oom_ = 0;
  // Failed steps (not for memory) each live request was in since its last step that ran.
  std::unordered_map<RequestId, int> strikes_;
};

void Engine::LoopDeleter::operator()(Loop* loop) const { delete loop; }

void Engine::start_loop() {
  inbox_ = std::make_shared<Inbox>();
  loop_.reset(new Loop(*this));
  thread_ = std::thread([this] { loop_->run(); });
}

EngineStats Engine::stats() const {
  std::lock_guard lock(step_mutex_);
  EngineStats s = stats_;
  s.num_running = static_cast<int64_t>(loop_->num_running());
  s.num_waiting = static_cast<int64_t>(loop_->num_waiting());
  s.num_preemptions = loop_->num_preemptions();
  loop_->add_spec_counts(s);
  const Cohere2Model::GraphCounts model = executor_.model().graph_counts();
  s.graph_replays = model.replayed, s.graphs_recorded = model.recorded, s.forward_passes = model.steps;
  if (const Cohere2Model* draft = executor_.draft()) {
    const Cohere2Model::GraphCounts d = draft->graph_counts();
    s.draft_graph_replays = d.replayed, s.draft_graphs_recorded = d.recorded, s.draft_forward_passes = d.steps;
  }
  return s;
}

}  // namespace tide
