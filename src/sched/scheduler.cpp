#include "sched/scheduler.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace tide {

void SchedulerOptions::validate() const {
  if (max_num_batched_tokens <= 0) fail("max_num_batched_tokens must be positive, got {}", max_num_batched_tokens);
  if (max_num_seqs <= 0) fail("max_num_seqs must be positive, got {}", max_num_seqs);
  if (max_prefill_chunk <= 0) fail("max_prefill_chunk must be positive, got {}", max_prefill_chunk);
  if (max_model_len <= 0) fail("max_model_len must be positive, got {}", max_model_len);
}

Scheduler::Scheduler(KvCacheManager& kv, SchedulerOptions options)
    : kv_(kv), options_(options), chunk_(std::min(options.max_prefill_chunk, options.max_num_batched_tokens)) {
  options_.validate();
}

Scheduler::~Scheduler() {
  for (auto& [id, r] : requests_) kv_.free(r->kv);
}

RequestId Scheduler::add(RequestParams params) {
  if (params.prompt.empty()) fail("the prompt is empty");
  if (params.max_tokens < 0) fail("max tokens must be >= 0, got {}", params.max_tokens);
  if (params.min_tokens < 0) fail("min tokens must be >= 0, got {}", params.min_tokens);
  if (params.prompt_leader != 0) {
    const Request* leader = find(params.prompt_leader);
    if (leader && leader->params.prompt != params.prompt) fail("request {} has another prompt", params.prompt_leader);
  }
  const int64_t num_prompt = static_cast<int64_t>(params.prompt.size());
  const int64_t total = num_prompt + params.max_tokens;
  if (total > options_.max_model_len) {
    fail("prompt ({} tokens) + max tokens ({}) exceeds the model's maximum length {}", num_prompt,
         params.max_tokens, options_.max_model_len);
  }
  // Checked for the request alone: then the oldest running request can always progress (see the header).
  if (!kv_.fits(total, chunk_)) {
    fail("prompt ({} tokens) + max tokens ({}) does not fit in the KV cache even alone; raise the KV cache memory",
         num_prompt, params.max_tokens);
  }
  const RequestId id = next_id_++;
  auto r = std::make_unique<Request>(id, std::move(params));
  if (r->params.max_tokens == 0 && r->params.prompt_logits == PromptLogits::kNone) {
    r->status = RequestStatus::kFinished;
    r->finish_reason = FinishReason::kLength;
    finished_.push_back(std::move(r));
    return id;
  }
  waiting_.push_back(r.get());
  requests_.emplace(id, std::move(r));
  return id;
}

bool Scheduler::finish(RequestId id, FinishReason reason, std::string error) {
  TIDE_CHECK(reason != FinishReason::kNone);
  const auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  Request& r = *it->second;
  if (in_flight_ && r.status == RequestStatus::kRunning) {
    if (r.pending_finish == FinishReason::kNone) {  // the first reason wins
      r.pending_finish = reason;
      r.error = std::move(error);
    }
    return true;
  }
  finish_now(r, reason, std::move(error));
  return true;
}

void Scheduler::set_proposer(Proposer propose, int64_t max_draft, int64_t disable_by_batch_size) {
  TIDE_CHECK(!in_flight_ && max_draft >= 0 && disable_by_batch_size >= 0);
  proposer_ = std::move(propose);
  max_draft_ = proposer_ ? max_draft : 0;
  disable_by_batch_size_ = disable_by_batch_size;
  drafted_per_position_.resize(static_cast<size_t>(std::max(max_draft_, static_cast<int64_t>(drafted_per_position_.size()))));
  accepted_per_position_.resize(drafted_per_position_.size());
}

void Scheduler::set_reclaimer(std::function<bool()> reclaim) {
  TIDE_CHECK(!in_flight_);
  reclaim_ = std::move(reclaim);
}

bool Scheduler::speculates() const {
  return max_draft_ > 0 &&
         (disable_by_batch_size_ == 0 || static_cast<int64_t>(running_.size()) < disable_by_batch_size_);
}

void Scheduler::retract(const ScheduledStep& step) {
  TIDE_CHECK(in_flight_ && step.step_id == next_step_id_ - 1);
  in_flight_ = false;
  for (const ScheduledSequence& s : step.seqs) {
    Request& r = *requests_.at(s.request_id);
    TIDE_CHECK(r.num_computed_tokens() == s.start_pos);
    kv_.truncate(r.kv);
    r.draft.clear();
  }
  std::vector<Request*> done;
  for (Request* r : running_) {
    if (r->pending_finish != FinishReason::kNone) done.push_back(r);
  }
  for (Request* r : done) finish_now(*r, r->pending_finish, r->error);
}

bool Scheduler::preempt_newest() {
  TIDE_CHECK(!in_flight_);
  if (running_.empty()) return false;
  Plan none;
  preempt_newest(none);
  return true;
}

// ---  scheduling

ScheduledStep Scheduler::schedule() {
  TIDE_CHECK(!in_flight_);  // update() of the previous step came first
  Plan plan;
  plan.token_budget = step_token_limit_ > 0 ? std::min(options_.max_num_batched_tokens, step_token_limit_)
                                            : options_.max_num_batched_tokens;
  const int64_t chunk = std::min(chunk_, plan.token_budget);
  plan.max_draft = speculates() ? max_draft_ : 0;

  // 1. Decodes, oldest first: one token each keeps every running request's latency flat. The loop bound is
  //    re-read because reserve() may preempt from the back of running_.
  for (size_t i = 0; i < running_.size() && plan.token_budget > 0; ++i) {
    if (running_[i]->is_decoding()) reserve_decode(*running_[i], plan);
  }
  // 2. Prefill chunks of running requests (partly computed prompts, recomputes), oldest first.
  for (size_t i = 0; i < running_.size() && plan.token_budget > 0; ++i) {
    Request& r = *running_[i];
    if (r.is_decoding()) continue;
    reserve(r, std::min({r.num_tokens_to_compute(), chunk, plan.token_budget}), plan);
  }
  // 3. New admissions, in queue order; not in a step that had to preempt, where an admission would only
  //    take the blocks an older request needs next step (and be preempted again: thrash).
  if (!plan.preempted) admit_waiting(plan, chunk);

  ScheduledStep step;
  step.step_id = next_step_id_++;
  std::vector<const Request*> requests;
  for (const Planned& e : plan.entries) {
    const Request& r = *e.request;
    const int64_t start = r.num_computed_tokens();
    const auto num_draft = static_cast<int64_t>(r.draft.size());
    const bool samples = start + e.num_tokens == r.num_tokens() + num_draft && r.params.max_tokens > 0;
    step.seqs.push_back(ScheduledSequence{r.id, start, e.num_tokens, samples, num_draft, r.num_prompt_tokens()});
    requests.push_back(&r);
  }
  build_forward_batch(step, requests);
  step.copies = kv_.take_copies();
  in_flight_ = true;
  return step;
}

void Scheduler::reserve_decode(Request& r, Plan& plan) {
  r.draft.clear();
  // Drafts beyond the tokens the request may still emit (max_tokens, the model's length) are never kept; the
  // verify chunk is a chunk like a prompt's (at most chunk_ tokens, within the step's budget).
  const int64_t room = std::min({plan.max_draft, r.params.max_tokens - r.num_output_tokens() - 1,
                                 options_.max_model_len - r.num_tokens() - 1, plan.token_budget - 1, chunk_ - 1});
  if (room > 0) {
    proposer_(r, room, r.draft);
    if (static_cast<int64_t>(r.draft.size()) > room) r.draft.resize(static_cast<size_t>(room));
  }
  const int64_t n = reserve(r, 1 + static_cast<int64_t>(r.draft.size()), plan);
  r.draft.resize(static_cast<size_t>(std::max<int64_t>(0, n - 1)));  // what the blocks allowed
}

int64_t Scheduler::reserve(Request& r, int64_t want, Plan& plan) {
  while (true) {
    // A shorter chunk than asked is still progress and costs nobody a recompute, so shrink before preempting.
    const int64_t n = kv_.num_appendable_tokens(r.kv, want);
    if (n > 0) {
      kv_.append(r.kv, n);
      plan.entries.push_back(Planned{&r, n});
      plan.token_budget -= n;
      return n;
    }
    if (reclaim_ && reclaim_()) continue;  // blocks another cache of the arena holds go before any request's
    if (running_.back() != &r) {
      preempt_newest(plan);
      continue;
    }
    if (running_.size() == 1) {  // alone, everything else preempted: waiting would never end
      finish_now(r, FinishReason::kError,
                 fmt::format("request {} cannot make progress: the KV cache has no block for its next token even "
                             "with every other request preempted",
                             r.id));
      return 0;
    }
    preempt_newest(plan);  // r itself is the newest: it waits for the older ones
    return 0;
  }
}

void Scheduler::preempt_newest(Plan& plan) {
  Request& victim = *running_.back();
  plan.preempted = true;
  // A victim planned earlier in this step (a decode) gives its tokens back to the budget.
  const auto it = std::find_if(plan.entries.begin(), plan.entries.end(), [&](const Planned& e) { return e.request == &victim; });
  if (it != plan.entries.end()) {
    plan.token_budget += it->num_tokens;
    plan.entries.erase(it);
  }
  kv_.free(victim.kv);  // registered blocks stay cached: the recompute may reuse them
  victim.draft.clear();
  victim.status = RequestStatus::kPreempted;
  ++victim.num_preemptions;
  ++num_preemptions_;
  running_.pop_back();
  waiting_.push_front(&victim);  // older than every waiting request: FCFS puts it first
}

void Scheduler::admit_waiting(Plan& plan, int64_t chunk) {
  const int64_t max_running =
      running_limit_ > 0 ? std::min(options_.max_num_seqs, running_limit_) : options_.max_num_seqs;
  while (!waiting_.empty() && plan.token_budget > 0 && static_cast<int64_t>(running_.size()) < max_running) {
    Request& r = *waiting_.front();
    // Another sample of a prompt still being computed waits for it, ahead of later requests (FCFS): the
    // leader is older and running, so the wait ends within its prefill.
    if (r.params.prompt_leader != 0 && r.num_preemptions == 0) {
      const Request* leader = find(r.params.prompt_leader);
      if (leader && leader->num_computed_tokens() < leader->num_prompt_tokens()) break;
    }
    // Decided before admit() so that a refusal leaves no trace (LRU order, hit counts).
    const bool reuse = r.params.prompt_logits != PromptLogits::kAll;
    const int64_t n = kv_.num_admissible_tokens(r.token_ids, std::min(chunk, plan.token_budget), reuse);
    if (n == 0) {
      if (reclaim_ && reclaim_()) continue;  // another cache of the arena gave blocks back: try again
      // Nobody overtakes the head of the queue (FCFS); running requests will finish and free blocks. With
      // none running, every block is free and it still does not fit: an error, not a hang.
      if (!running_.empty()) break;
      finish_now(r, FinishReason::kError,
                 fmt::format("request {} cannot be admitted: the KV cache has no room for it even when empty", r.id));
      continue;
    }
    waiting_.pop_front();
    const int64_t reused = kv_.admit(r.kv, r.token_ids, reuse);
    TIDE_CHECK(n <= r.num_tokens() - reused);
    if (r.num_preemptions == 0) r.num_cached_tokens = reused;
    kv_.append(r.kv, n);
    r.status = RequestStatus::kRunning;
    running_.push_back(&r);
    plan.entries.push_back(Planned{&r, n});
    plan.token_budget -= n;
  }
}

// ---  after the step

void Scheduler::update(const ScheduledStep& step, std::span<const int32_t> sampled_ids) {
  TIDE_CHECK(in_flight_ && step.step_id == next_step_id_ - 1);
  if (sampled_ids.size() != step.sample_ids.size()) {
    fail("step {} samples {} rows but {} ids were given", step.step_id, step.sample_ids.size(), sampled_ids.size());
  }
  in_flight_ = false;
  size_t row = 0;
  for (const ScheduledSequence& s : step.seqs) {
    Request& r = *requests_.at(s.request_id);  // requests of a step in flight never finish before this
    TIDE_CHECK(r.num_computed_tokens() == s.start_pos);
    // Drafted tokens (a verify step's) are committed below, as far as they are accepted.
    kv_.commit(r.kv, std::span<const int32_t>(r.token_ids)
                         .subspan(static_cast<size_t>(s.start_pos), static_cast<size_t>(s.num_tokens - s.num_draft)));
    r.prompt_logits_done = std::max(r.prompt_logits_done, std::min(r.num_computed_tokens(), r.num_prompt_tokens()));
    if (r.params.max_tokens == 0 && r.num_computed_tokens() >= r.num_prompt_tokens() &&
        r.pending_finish == FinishReason::kNone) {
      r.pending_finish = FinishReason::kLength;  // a prompt computed for its logits alone
    }
    if (!s.samples) continue;
    const std::span<const int32_t> ids = sampled_ids.subspan(row, static_cast<size_t>(1 + s.num_draft));
    row += ids.size();
    if (s.num_draft > 0) {
      // Drafts are kept while each equals the id its row sampled; the first row that sampled another id ends
      // the run with that id. K/V past the kept drafts were computed for rejected tokens: their blocks go back.
      size_t accepted = 0;
      while (accepted < r.draft.size() && r.draft[accepted] == ids[accepted]) ++accepted;
      kv_.commit(r.kv, std::span<const int32_t>(r.draft).first(accepted));
      kv_.truncate(r.kv);
      r.draft.clear();
      num_draft_tokens_ += s.num_draft;
      num_accepted_tokens_ += static_cast<int64_t>(accepted);
      ++num_verifies_;
      for (size_t i = 0; i < static_cast<size_t>(s.num_draft); ++i) {
        ++drafted_per_position_[i];
        if (i < accepted) ++accepted_per_position_[i];
      }
      for (size_t i = 0; i <= accepted; ++i) {
        if (!append_sampled(r, ids[i])) break;  // a stop id or max_tokens cuts the run where it would have
      }
      continue;
    }
    append_sampled(r, ids.front());
  }
  std::vector<Request*> done;
  for (Request* r : running_) {
    if (r->pending_finish != FinishReason::kNone) done.push_back(r);
  }
  for (Request* r : done) finish_now(*r, r->pending_finish);
}

bool Scheduler::append_sampled(Request& r, int32_t id) {
  if (r.pending_finish != FinishReason::kNone) return false;  // cancelled during the step: the id is dropped
  r.token_ids.push_back(id);
  const bool stop = r.num_output_tokens() > r.params.min_tokens &&
                    std::find(r.params.stop_ids.begin(), r.params.stop_ids.end(), id) != r.params.stop_ids.end();
  if (stop) {
    r.pending_finish = FinishReason::kStop;
  } else if (r.num_output_tokens() >= r.params.max_tokens) {
    r.pending_finish = FinishReason::kLength;
  }
  return r.pending_finish == FinishReason::kNone;
}

void Scheduler::finish_now(Request& r, FinishReason reason, std::string error) {
  if (const auto it = std::find(running_.begin(), running_.end(), &r); it != running_.end()) running_.erase(it);
  if (const auto it = std::find(waiting_.begin(), waiting_.end(), &r); it != waiting_.end()) waiting_.erase(it);
  kv_.free(r.kv);
  r.status = RequestStatus::kFinished;
  r.finish_reason = reason;
  r.pending_finish = FinishReason::kNone;
  r.error = std::move(error);
  const auto it = requests_.find(r.id);
  finished_.push_back(std::move(it->second));
  requests_.erase(it);
}

std::vector<std::unique_ptr<Request>> Scheduler::take_finished() {
  std::vector<std::unique_ptr<Request>> out;
  out.swap(finished_);
  return out;
}

const Request* Scheduler::find(RequestId id) const {
  const auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

std::vector<const SequenceKv*> Scheduler::live_sequences() const {
  std::vector<const SequenceKv*> out;  // waiting requests hold no blocks (and have no tables yet)
  for (const Request* r : running_) out.push_back(&r->kv);
  return out;
}

}  // namespace tide
