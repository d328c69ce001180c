#include "runtime/engine_speculation.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/log.h"

namespace tide {

Speculation::Speculation(ModelExecutor& executor, KvCacheManager* draft_kv, bool in_arena,
                         const spec::SpeculativeConfig& config, int64_t max_step_tokens, int64_t max_chunk)
    : config_(config), in_arena_(in_arena) {
  if (draft_kv != nullptr) {
    drafts_.emplace(executor, *draft_kv, max_step_tokens, max_chunk);
    sampled_drafts_ = executor.backend().supports_draft_sampling();
  }
}

void Speculation::attach(Scheduler& scheduler, OutputProcessor& outputs) {
  scheduler.set_proposer([this, &outputs](const Request& r, int64_t max_tokens, std::vector<int32_t>& draft) {
    if (drafts_) {
      drafts_->take(r.id, max_tokens, draft);
    } else {
      outputs.propose(r.id, max_tokens, draft);
    }
    outputs.constrain_draft(r, draft);
  }, config_.num_speculative_tokens, config_.disable_by_batch_size);
  // A draft cache in the model's arena gives its blocks back before any request is preempted or waits.
  if (drafts_ && in_arena_) scheduler.set_reclaimer([this] { return drafts_->reclaim(); });
}

std::optional<std::string> Speculation::before_step(Scheduler& scheduler, OutputProcessor& outputs,
                                                    const KvCacheManager& model_kv, EngineStats& stats) {
  if (!drafts_) return std::nullopt;
  if (!scheduler.speculates()) {
    drafts_->skip_round();  // too many requests run for speculation to pay: no draft step either
    return std::nullopt;
  }
  if (steps_without_drafts_ > 0) {
    --steps_without_drafts_;
    return std::nullopt;
  }
  const auto drafting = std::chrono::steady_clock::now();
  const auto add_seconds = [&] {
    stats.draft_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - drafting).count();
  };
  const int64_t k = config_.num_speculative_tokens;
  std::vector<DraftRequest> requests;
  for (const Request* r : scheduler.running_requests()) {
    if (!r->is_decoding() || !outputs.speculates(r->id)) continue;
    const int64_t room = std::min(k, r->params.max_tokens - r->num_output_tokens() - 1);
    if (room <= 0) continue;
    const auto done = static_cast<uint64_t>(r->num_output_tokens());
    requests.push_back(
        DraftRequest{r->id, r->token_ids, room, outputs.draft_row(r->id, done, /*acceptance=*/false, sampled_drafts_)});
  }
  // In the model's arena the draft leaves free what the model's next step may need: a block per group for
  // each running request (one crossing a block boundary), and one request more.
  drafts_->set_keep_free(in_arena_ ? model_kv.num_groups() * (static_cast<int64_t>(scheduler.num_running()) + 1) : 0);
  try {
    drafts_->run(requests);
  } catch (const DraftCopyError& e) {
    add_seconds();
    return std::string(e.what());
  } catch (const std::exception& e) {
    steps_without_drafts_ = kStepsWithoutDrafts;
    log_info("the draft model's step failed: {}; the next {} steps run without drafts", e.what(), kStepsWithoutDrafts);
  }
  add_seconds();
  return std::nullopt;
}

const DraftSampling* Speculation::sampling(const ScheduledStep& step, const Scheduler& scheduler,
                                           OutputProcessor& outputs) {
  if (!drafts_) return nullptr;
  return drafts_->sampling(step, scheduler, [&](RequestId id, uint64_t counter) {
    return outputs.draft_row(id, counter, /*acceptance=*/true, /*sampled=*/true);
  });
}

void Speculation::release(RequestId id) {
  if (drafts_) drafts_->release(id);
}

void Speculation::retire(const Scheduler& scheduler) {
  add_counts(past_, scheduler);
  if (drafts_) drafts_->release_all();
}

void Speculation::add_counts(EngineStats& s, const Scheduler& scheduler) const {
  s.spec_draft_tokens = past_.spec_draft_tokens + scheduler.num_draft_tokens();
  s.spec_accepted_tokens = past_.spec_accepted_tokens + scheduler.num_accepted_tokens();
  s.spec_verifies = past_.spec_verifies + scheduler.num_verifies();
  const auto add = [](const std::vector<int64_t>& past, const std::vector<int64_t>& now) {
    std::vector<int64_t> sum(std::max(past.size(), now.size()), 0);
    for (size_t i = 0; i < past.size(); ++i) sum[i] += past[i];
    for (size_t i = 0; i < now.size(); ++i) sum[i] += now[i];
    return sum;
  };
  s.spec_draft_tokens_per_position = add(past_.spec_draft_tokens_per_position, scheduler.drafted_per_position());
  s.spec_accepted_tokens_per_position = add(past_.spec_accepted_tokens_per_position, scheduler.accepted_per_position());
  s.spec_draft_steps = drafts_ ? drafts_->num_steps() : 0;
  s.spec_draft_reclaims = drafts_ ? drafts_->num_reclaims() : 0;
}

}  // namespace tide
