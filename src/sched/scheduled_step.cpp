#include "sched/scheduled_step.h"

#include "core/error.h"

namespace tide {

void build_forward_batch(ScheduledStep& step, std::span<const Request* const> requests) {
  TIDE_CHECK(requests.size() == step.seqs.size());
  ForwardBatch& batch = step.batch;
  batch = ForwardBatch{};
  step.sample_ids.clear();
  step.prompt_rows.clear();
  std::vector<int32_t> prompt_indices;
  for (size_t i = 0; i < step.seqs.size(); ++i) {
    const ScheduledSequence& s = step.seqs[i];
    const Request& r = *requests[i];
    TIDE_CHECK(r.id == s.request_id && s.num_tokens > 0 && s.num_draft == static_cast<int64_t>(r.draft.size()) &&
               s.start_pos + s.num_tokens <= r.num_tokens() + s.num_draft && s.num_draft < s.num_tokens);
    const auto offset = static_cast<int32_t>(batch.token_ids.size());
    for (int64_t pos = s.start_pos; pos < s.start_pos + s.num_tokens; ++pos) batch.token_ids.push_back(r.token_at(pos));
    ForwardSequence fs{s.start_pos, s.num_tokens, {}};
    for (const std::vector<int32_t>& table : r.kv.block_tables) fs.block_tables.emplace_back(table);
    batch.seqs.push_back(std::move(fs));
    if (s.samples) {
      for (int64_t i = s.num_draft; i >= 0; --i) {
        batch.logit_indices.push_back(offset + static_cast<int32_t>(s.num_tokens - 1 - i));
        step.sample_ids.push_back(s.request_id);
      }
    }
    if (r.params.prompt_logits == PromptLogits::kNone) continue;
    const int64_t last = r.num_prompt_tokens() - 1;
    const int64_t from =
        r.params.prompt_logits == PromptLogits::kAll ? r.prompt_logits_done : std::max(last, r.prompt_logits_done);
    for (int64_t pos = std::max(from, s.start_pos); pos < std::min(s.start_pos + s.num_tokens, last + 1); ++pos) {
      prompt_indices.push_back(offset + static_cast<int32_t>(pos - s.start_pos));
      step.prompt_rows.push_back(PromptLogitsRow{s.request_id, pos});
    }
  }
  batch.logit_indices.insert(batch.logit_indices.end(), prompt_indices.begin(), prompt_indices.end());
}

}  // namespace tide
