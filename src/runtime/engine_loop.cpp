// Engine's step loop (engine.h): the thread that owns the Scheduler, turns submissions into scheduler requests
// (one per sample), runs each step (block copies, forward, sample, logprobs), detokenizes and applies stop
// strings, and hands SampleDeltas to the request handles; and the thread-safe side (submit, stats).
#include <algorithm>
#include <random>
#include <unordered_map>

#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/text_stream.h"
#include "sched/scheduler.h"

namespace tide {

// ---  the step loop

struct Engine::Submission {
  std::shared_ptr<RequestHandle> handle;
  std::vector<int32_t> prompt;
  GenerateOptions options;
};

struct Engine::Inbox {
  std::mutex mutex;
  std::condition_variable wake;
  std::vector<Submission> submissions;
  std::vector<uint64_t> cancels;  // handle ids
  bool stop = false;
  uint64_t next_id = 1;
};

// The loop thread's state: the scheduler and, per scheduler request (one per sample), what the engine keeps
// beside it. Only the loop thread touches it.
class Engine::Loop {
 public:
  explicit Loop(Engine& engine) : engine_(engine) { reset_scheduler(); }

  void run() {
    engine_.backend_->bind_thread();
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
      {
        std::lock_guard step_lock(engine_.step_mutex_);
        for (Submission& s : submissions) start(std::move(s), out);
        for (uint64_t handle : cancels) cancel(handle);
        if (stop) {
          for (auto& [id, sample] : samples_) scheduler_->abort(id);
        }
        finish(scheduler_->take_finished(), out);
        if (!stop && scheduler_->has_unfinished()) step(out);
      }
      out.deliver();
      if (stop) return;
    }
  }

  // Under the step lock.
  size_t num_running() const { return scheduler_->num_running(); }
  size_t num_waiting() const { return scheduler_->num_waiting(); }
  int64_t num_preemptions() const { return past_preemptions_ + scheduler_->num_preemptions(); }

 private:
  // A request as submitted; shared by its samples.
  struct Live {
    std::shared_ptr<RequestHandle> handle;
    GenerateOptions options;
  };
  // One sample = one scheduler request.
  struct Sample {
    std::shared_ptr<Live> live;
    int index = 0;
    uint64_t seed = 0;     // draw k of the sample uses (seed, k), whatever else a batch holds
    TokenHistory history;  // for the penalties and logit_bias
    TextStream text;
    int64_t emitted = 0;   // output ids already in a delta
  };
  // Deltas of one loop iteration, handed to the handles once the step lock is released.
  struct Outbox {
    std::vector<std::pair<std::shared_ptr<RequestHandle>, SampleDelta>> deltas;
    std::unordered_map<RequestId, size_t> index;  // request -> its delta this iteration

    SampleDelta& of(RequestId id, const Sample& s) {
      const auto [it, added] = index.try_emplace(id, deltas.size());
      if (added) {
        deltas.emplace_back(s.live->handle, SampleDelta{});
        deltas.back().second.index = s.index;
      }
      return deltas[it->second].second;
    }
    void deliver() {
      for (auto& [handle, delta] : deltas) handle->deliver(std::move(delta));
    }
  };

  void reset_scheduler() {
    if (scheduler_) past_preemptions_ += scheduler_->num_preemptions();
    const EngineOptions& o = engine_.options_;
    scheduler_ = std::make_unique<Scheduler>(
        engine_.kv_manager_, SchedulerOptions{o.max_num_batched_tokens, o.max_num_seqs, o.max_prefill_chunk,
                                              engine_.max_model_len()});
  }

  void start(Submission&& submission, Outbox& out) {
    auto live = std::make_shared<Live>(Live{std::move(submission.handle), std::move(submission.options)});
    const GenerateOptions& o = live->options;
    std::vector<RequestId>& ids = by_handle_[live->handle->id()];
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
      // Samples after the first compute the prompt once, in the first one's blocks (prefix caching).
      if (engine_.options_.enable_prefix_caching) params.prompt_leader = leader;
      Sample sample{live, i, seed + static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull, TokenHistory{},
                    TextStream(engine_.tokenizer_, o.stop, o.include_stop_str_in_output, o.skip_special_tokens)};
      if (o.sampling.has_penalties()) sample.history.add_prompt(submission.prompt);
      for (const auto& [token, bias] : o.sampling.logit_bias) sample.history.set_bias(token, bias);
      RequestId id = 0;
      try {
        id = scheduler_->add(std::move(params));
      } catch (const Error& e) {  // submit() checked the same: only a bug gets here
        SampleDelta& d = out.deltas.emplace_back(live->handle, SampleDelta{}).second;
        d.index = i;
        d.finish_reason = FinishReason::kError;
        d.error = e.what();
        continue;
      }
      if (i == 0) leader = id;
      ids.push_back(id);
      samples_.emplace(id, std::move(sample));
    }
  }

  void cancel(uint64_t handle) {
    const auto it = by_handle_.find(handle);
    if (it == by_handle_.end()) return;  // finished already
    for (RequestId id : it->second) scheduler_->abort(id);
  }

  // One forward step of the scheduler's batch, its sampling, and the deltas it produces.
  void step(Outbox& out) {
    std::vector<std::unique_ptr<Request>> done;
    std::vector<TokenLogprobs> logprobs;  // per sampled row, when any row asked
    ScheduledStep step;
    try {
      step = scheduler_->schedule();
      logprobs = run(step);
    } catch (const std::exception& e) {
      // The step failed (a backend error): every live request ends with the error, the blocks go back with the
      // scheduler, and the loop goes on with new requests.
      fail_all(fmt::format("the engine step failed: {}", e.what()), out);
      return;
    }
    // New ids: penalties' history, text and stop strings, logprobs; then the requests that finished.
    for (std::unique_ptr<Request>& r : scheduler_->take_finished()) done.push_back(std::move(r));
    std::unordered_map<RequestId, const Request*> done_by_id;
    for (const std::unique_ptr<Request>& r : done) done_by_id.emplace(r->id, r.get());
    EngineStats& stats = engine_.stats_;
    stats.num_steps += step.empty() ? 0 : 1;
    stats.generation_tokens += static_cast<int64_t>(step.sample_ids.size());
    for (const ScheduledSequence& seq : step.seqs) {
      const Request* r = scheduler_->find(seq.request_id);
      if (!r) r = done_by_id.at(seq.request_id);
      stats.prompt_tokens += std::max<int64_t>(0, std::min(seq.start_pos + seq.num_tokens, r->num_prompt_tokens()) - seq.start_pos);
    }
    for (size_t row = 0; row < step.sample_ids.size(); ++row) {
      const RequestId id = step.sample_ids[row];
      const Request* r = scheduler_->find(id);
      if (!r) r = done_by_id.at(id);
      Sample& s = samples_.at(id);
      const GenerateOptions& o = s.live->options;
      if (s.emitted == r->num_output_tokens()) continue;  // cancelled during the step: no new id
      SampleDelta& d = out.of(id, s);
      const auto ids = r->output_ids();
      for (; s.emitted < r->num_output_tokens(); ++s.emitted) {
        const int32_t token = ids[static_cast<size_t>(s.emitted)];
        if (o.sampling.has_penalties()) s.history.add_output(token);
        d.ids.push_back(token);
        if (o.logprobs >= 0) {
          TokenLogprobs lp = logprobs.at(row);
          lp.top.resize(static_cast<size_t>(o.logprobs));
          d.logprobs.push_back(std::move(lp));
        }
        if (s.text.stopped()) continue;
        try {
          const TextStream::Piece piece = s.text.push(token, s.emitted + 1 >= o.min_tokens);
          d.text += piece.text;
          if (piece.stopped) scheduler_->finish(id, FinishReason::kStop);  // no-op when it finished already
        } catch (const Error& e) {
          if (!scheduler_->finish(id, FinishReason::kError)) continue;
          d.error = fmt::format("token {} cannot be detokenized: {}", token, e.what());
        }
      }
    }
    for (std::unique_ptr<Request>& r : scheduler_->take_finished()) done.push_back(std::move(r));
    finish(std::move(done), out);
  }

  // The step's block copies, forward and sample op; returns the logprobs of each sampled row when any asked.
  std::vector<TokenLogprobs> run(const ScheduledStep& step) {
    Backend& backend = *engine_.backend_;
    if (!step.copies.empty()) {  // evictions and copies back land before the forward
      backend.copy_blocks(engine_.kv_storage_.front(), engine_.host_kv_storage_, step.copies);
    }
    std::vector<int32_t> sampled(step.sample_ids.size());
    std::vector<TokenLogprobs> logprobs;
    if (step.empty()) {
      // The scheduler makes progress or finishes requests with an error; a long run of empty steps is a bug.
      TIDE_CHECK(++idle_steps_ < 1000);
    } else {
      idle_steps_ = 0;
      const Tensor logits = engine_.model_.forward(step.batch, engine_.kv_storage_);
      if (!sampled.empty()) logprobs = sample(step, logits, sampled);
    }
    scheduler_->update(step, sampled);
    return logprobs;
  }

  // One sample op over every row of the step, each with its own request's parameters and stream.
  std::vector<TokenLogprobs> sample(const ScheduledStep& step, const Tensor& logits, std::vector<int32_t>& sampled) {
    Backend& backend = *engine_.backend_;
    rows_.clear();
    tokens_.clear();
    token_starts_.assign(1, 0);
    bool any_tokens = false;
    int top_n = -1;
    for (RequestId id : step.sample_ids) {
      const Request& r = *scheduler_->find(id);
      const Sample& s = samples_.at(id);
      const GenerateOptions& o = s.live->options;
      rows_.push_back(o.sampling.row(s.seed, static_cast<uint64_t>(r.num_output_tokens())));
      const bool ban_stops = r.num_output_tokens() < o.min_tokens && !r.params.stop_ids.empty();
      if (ban_stops) {
        s.history.append_with_banned(r.params.stop_ids, tokens_);
      } else if (o.sampling.needs_token_list()) {
        tokens_.insert(tokens_.end(), s.history.tokens().begin(), s.history.tokens().end());
      }
      any_tokens = any_tokens || ban_stops || o.sampling.needs_token_list();
      token_starts_.push_back(static_cast<int32_t>(tokens_.size()));
      top_n = std::max(top_n, o.logprobs);
    }
    const int64_t num_rows = static_cast<int64_t>(sampled.size());
    SamplingBatch batch{rows_, {}, tokens_};
    if (any_tokens) batch.history_starts = token_starts_;
    // The sample op penalizes the logits in place: logprobs read a copy of the model's.
    Tensor raw;
    if (top_n >= 0) {
      raw = backend.alloc(logits.dtype, logits.shape);
      backend.copy(raw, logits);
    }
    Tensor ids = backend.alloc(DType::kI32, Shape{num_rows});
    backend.sample(ids, logits, batch);
    backend.download(ids, sampled.data());
    if (top_n < 0) return {};
    Tensor values = backend.alloc(DType::kF32, Shape{num_rows, 1 + top_n});
    Tensor top_ids = backend.alloc(DType::kI32, Shape{num_rows, top_n});
    backend.logprobs(values, top_ids, raw, ids, top_n);
    std::vector<float> v(static_cast<size_t>(values.numel()));
    std::vector<int32_t> t(static_cast<size_t>(top_ids.numel()));
    backend.download(values, v.data());
    if (top_n > 0) backend.download(top_ids, t.data());
    std::vector<TokenLogprobs> out(static_cast<size_t>(num_rows));
    for (size_t r = 0; r < out.size(); ++r) {
      out[r].id = sampled[r];
      out[r].logprob = v[r * static_cast<size_t>(1 + top_n)];
      for (size_t j = 0; j < static_cast<size_t>(top_n); ++j) {
        out[r].top.emplace_back(t[r * static_cast<size_t>(top_n) + j], v[r * static_cast<size_t>(1 + top_n) + 1 + j]);
      }
    }
    return out;
  }

  // The final deltas of finished requests (text held back, finish reason, statistics); forgets them.
  void finish(std::vector<std::unique_ptr<Request>> done, Outbox& out) {
    engine_.stats_.num_requests_finished += static_cast<int64_t>(done.size());
    for (const std::unique_ptr<Request>& r : done) {
      const auto it = samples_.find(r->id);
      TIDE_CHECK(it != samples_.end());
      Sample& s = it->second;
      SampleDelta& d = out.of(r->id, s);
      // A stop string that completed in the step where max_tokens was reached still ends with "stop".
      d.finish_reason = s.text.stopped() ? FinishReason::kStop : r->finish_reason;
      if (d.finish_reason == FinishReason::kError && d.error.empty()) d.error = r->error;
      d.text += s.text.finish();
      d.num_output_tokens = r->num_output_tokens();
      d.cached_tokens = r->num_cached_tokens;
      d.num_preemptions = r->num_preemptions;
      forget(r->id, s);
      samples_.erase(it);
    }
  }

  void forget(RequestId id, const Sample& s) {
    const auto it = by_handle_.find(s.live->handle->id());
    std::erase(it->second, id);
    if (it->second.empty()) by_handle_.erase(it);
  }

  void fail_all(const std::string& error, Outbox& out) {
    engine_.stats_.num_requests_finished += static_cast<int64_t>(samples_.size());
    for (auto& [id, s] : samples_) {
      SampleDelta& d = out.of(id, s);
      d.finish_reason = FinishReason::kError;
      d.error = error;
    }
    samples_.clear();
    by_handle_.clear();
    reset_scheduler();  // frees every request's blocks
  }

  Engine& engine_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unordered_map<RequestId, Sample> samples_;
  std::unordered_map<uint64_t, std::vector<RequestId>> by_handle_;  // live samples of each handle
  int64_t idle_steps_ = 0;
  int64_t past_preemptions_ = 0;  // of schedulers replaced after a failed step
  // Reused across steps.
  std::vector<SamplingRow> rows_;
  std::vector<int32_t> token_starts_;
  std::vector<HistoryToken> tokens_;
};

void Engine::LoopDeleter::operator()(Loop* loop) const { delete loop; }

void Engine::start_loop() {
  inbox_ = std::make_shared<Inbox>();
  loop_.reset(new Loop(*this));
  thread_ = std::thread([this] { loop_->run(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(inbox_->mutex);
    inbox_->stop = true;
  }
  inbox_->wake.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestHandle> Engine::submit(std::vector<int32_t> prompt, GenerateOptions options,
                                              DeltaCallback on_delta) {
  check_request(prompt, options);
  std::vector<NewRequest> one;
  one.push_back(NewRequest{std::move(prompt), std::move(options), std::move(on_delta)});
  return std::move(submit_together(std::move(one)).front());
}

std::vector<std::shared_ptr<RequestHandle>> Engine::submit_together(std::vector<NewRequest> requests) {
  std::weak_ptr<Inbox> weak = inbox_;
  auto cancel = [weak](uint64_t id) {
    if (const std::shared_ptr<Inbox> inbox = weak.lock()) {
      {
        std::lock_guard lock(inbox->mutex);
        inbox->cancels.push_back(id);
      }
      inbox->wake.notify_all();
    }
  };
  std::vector<std::shared_ptr<RequestHandle>> handles;
  {
    std::lock_guard lock(inbox_->mutex);
    if (inbox_->stop) fail("the engine is shutting down");
    for (NewRequest& r : requests) {
      handles.push_back(std::make_shared<RequestHandle>(inbox_->next_id++, r.options.n, cancel, std::move(r.on_delta)));
      inbox_->submissions.push_back(Submission{handles.back(), std::move(r.prompt), std::move(r.options)});
    }
  }
  inbox_->wake.notify_all();
  return handles;
}

EngineStats Engine::stats() const {
  std::lock_guard lock(step_mutex_);
  EngineStats s = stats_;
  s.num_running = static_cast<int64_t>(loop_->num_running());
  s.num_waiting = static_cast<int64_t>(loop_->num_waiting());
  s.num_preemptions = loop_->num_preemptions();
  return s;
}

}  // namespace tide
