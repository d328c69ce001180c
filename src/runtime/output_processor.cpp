#include "runtime/output_processor.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"

namespace tide {

namespace {

// A thinking block's length after `token` (-1: outside a block): the closing id ends it, a token inside it
// (a repeated opening too) counts, the opening id outside one starts it.
int64_t span_after(int64_t span, int32_t token, const SpanBudget& budget) {
  if (token == budget.close_id) return -1;
  if (span >= 0) return span + 1;
  return token == budget.open_id ? 0 : -1;
}

}  // namespace

SampleDelta& Outbox::of(RequestId id, const std::shared_ptr<RequestHandle>& handle, int index) {
  const auto [it, added] = index_.try_emplace(id, deltas_.size());
  if (added) {
    deltas_.emplace_back(handle, SampleDelta{});
    deltas_.back().second.index = index;
  }
  return deltas_[it->second].second;
}

void Outbox::deliver() {
  for (auto& [handle, delta] : deltas_) handle->deliver(std::move(delta));
  deltas_.clear();
  index_.clear();
}

void OutputProcessor::add(RequestId id, std::shared_ptr<Live> live, int index, uint64_t seed,
                          std::span<const int32_t> prompt) {
  const GenerateOptions& o = live->options;
  Sample sample{live, index, seed, TokenHistory{},
                TextStream(tokenizer_, o.stop, o.include_stop_str_in_output, o.skip_special_tokens)};
  if (o.sampling.has_penalties()) sample.history.add_prompt(prompt);
  for (const auto& [token, bias] : o.sampling.logit_bias) sample.history.set_bias(token, bias);
  if (o.constraint) sample.constraint = o.constraint->start();
  sample.speculates = speculative_ && o.speculative && (!sample.constraint || sample.constraint->clone() != nullptr);
  if (sample.speculates && speculative_->method == spec::SpeculativeConfig::Method::kNgram) {
    sample.ngram = std::make_unique<spec::NgramIndex>(speculative_->prompt_lookup_min, speculative_->prompt_lookup_max);
    sample.ngram->append(prompt);
  }
  if (const auto& budget = o.thinking_budget) {
    // A prompt whose last span marker opens the span (the template opened it) starts inside it.
    for (auto it = prompt.rbegin(); it != prompt.rend(); ++it) {
      if (*it == budget->close_id) break;
      if (*it == budget->open_id) {
        sample.span_tokens = 0;
        break;
      }
    }
  }
  by_handle_[live->handle->id()].push_back(id);
  samples_.emplace(id, std::move(sample));
}

std::vector<RequestId> OutputProcessor::requests_of(uint64_t handle_id) const {
  const auto it = by_handle_.find(handle_id);
  return it == by_handle_.end() ? std::vector<RequestId>{} : it->second;
}

bool OutputProcessor::speculates(RequestId id) const {
  const auto it = samples_.find(id);
  return it != samples_.end() && it->second.speculates;
}

void OutputProcessor::constrain_draft(const Request& r, std::vector<int32_t>& draft) const {
  const auto it = samples_.find(r.id);
  if (it == samples_.end() || !it->second.constraint || draft.empty()) return;
  const std::unique_ptr<TokenConstraint> state = it->second.constraint->clone();
  size_t kept = 0;
  const std::vector<int32_t>& stops = r.params.stop_ids;
  while (kept < draft.size() && std::find(stops.begin(), stops.end(), draft[kept]) == stops.end() &&
         state->accept(draft[kept])) {
    ++kept;
  }
  draft.resize(kept);
}

SamplingRow OutputProcessor::draft_row(RequestId id, uint64_t counter, bool acceptance, bool sampled) const {
  const Sample& s = samples_.at(id);
  const SamplingParams& o = s.live->options.sampling;
  // Streams of the sample's seed that its own draws (seed, counter) never meet.
  constexpr uint64_t kDraftDraws = 0x243F6A8885A308D3ull, kAcceptanceDraws = 0x13198A2E03707344ull;
  const uint64_t seed = s.seed ^ (acceptance ? kAcceptanceDraws : kDraftDraws);
  if (!sampled || o.temperature == 0) return SamplingRow{0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, seed, counter};
  SamplingRow row = o.row(seed, counter);
  row.repetition_penalty = 1.0f;
  row.presence_penalty = 0.0f;
  row.frequency_penalty = 0.0f;
  return row;
}

void OutputProcessor::propose(RequestId id, int64_t max_tokens, std::vector<int32_t>& draft) const {
  const auto it = samples_.find(id);
  if (it == samples_.end() || !it->second.ngram) return;
  const int64_t k = std::min<int64_t>(max_tokens, spec::SpeculativeConfig::kMaxSpeculativeTokens);
  draft = it->second.ngram->propose(static_cast<int>(k));
}

std::vector<RequestId> OutputProcessor::requests() const {
  std::vector<RequestId> ids;
  for (const auto& [id, sample] : samples_) ids.push_back(id);
  return ids;
}

SamplingBatch OutputProcessor::sampling_batch(const ScheduledStep& step, const Scheduler& scheduler,
                                              int& top_logprobs) {
  rows_.clear();
  tokens_.clear();
  token_starts_.assign(1, 0);
  mask_index_.clear();
  mask_draft_.clear();
  int32_t num_masks = 0;
  bool any_tokens = false;
  int64_t drafted = 0;
  top_logprobs = -1;
  for (size_t row = 0; row < step.sample_ids.size(); ++row) {
    const RequestId id = step.sample_ids[row];
    const Request& r = *scheduler.find(id);
    const Sample& s = samples_.at(id);
    const GenerateOptions& o = s.live->options;
    // Row i of a verify step's rows samples after drafted tokens d_1 .. d_i: the draw and the history are those
    // the row would have had without speculation, had the drafts been sampled (only then is its id kept).
    const int64_t i = row > 0 && step.sample_ids[row - 1] == id ? ++drafted : (drafted = 0);
    const int64_t outputs = r.num_output_tokens() + i;
    rows_.push_back(o.sampling.row(s.seed, static_cast<uint64_t>(outputs)));
    const bool ban_stops = outputs < o.min_tokens && !r.params.stop_ids.empty();
    // The thinking block's length after d_1 .. d_i, as record() would count it had they been sampled.
    int64_t span = s.span_tokens;
    if (o.thinking_budget) {
      for (int64_t j = 0; j < i; ++j) span = span_after(span, r.draft[static_cast<size_t>(j)], *o.thinking_budget);
    }
    const bool force_close = o.thinking_budget && span >= o.thinking_budget->max_tokens;
    const bool list = ban_stops || force_close || o.sampling.needs_token_list();
    const TokenHistory* history = &s.history;
    if (i > 0 && o.sampling.has_penalties()) {
      // The request's rows are consecutive: the history of row i is row i - 1's with d_i added.
      if (i == 1) draft_history_ = s.history;
      draft_history_.add_output(r.draft[static_cast<size_t>(i - 1)]);
      history = &draft_history_;
    }
    if (ban_stops || force_close) {
      history->append_with(ban_stops ? std::span<const int32_t>(r.params.stop_ids) : std::span<const int32_t>(),
                           force_close ? o.thinking_budget->close_id : -1, tokens_);
    } else if (list) {
      tokens_.insert(tokens_.end(), history->tokens().begin(), history->tokens().end());
    }
    any_tokens = any_tokens || list;
    token_starts_.push_back(static_cast<int32_t>(tokens_.size()));
    top_logprobs = std::max(top_logprobs, o.logprobs);
    mask_index_.push_back(s.constraint ? num_masks++ : -1);
    mask_draft_.push_back(s.constraint && i > 0 ? r.draft[static_cast<size_t>(i - 1)] : -1);
  }
  SamplingBatch batch{rows_, {}, tokens_};
  if (any_tokens) batch.history_starts = token_starts_;
  if (num_masks > 0) {
    masks_.resize(static_cast<size_t>(num_masks * mask_words(vocab_)));
    batch.mask_index = mask_index_;
    batch.masks = masks_;
  }
  return batch;
}

void OutputProcessor::fill_masks(const ScheduledStep& step) {
  const auto words = static_cast<size_t>(mask_words(vocab_));
  // A verify step's rows after the first: a copy of the sample's state advanced through the drafts before them
  // (constrain_draft cut each draft where the constraint refused it).
  std::unique_ptr<TokenConstraint> ahead;
  for (size_t row = 0; row < step.sample_ids.size() && row < mask_index_.size(); ++row) {
    const int32_t m = mask_index_[row];
    if (m < 0) continue;
    TokenConstraint* state = samples_.at(step.sample_ids[row]).constraint.get();
    if (mask_draft_[row] >= 0) {
      if (mask_draft_[row - 1] < 0) ahead = state->clone();
      TIDE_CHECK(ahead && ahead->accept(mask_draft_[row]));
      state = ahead.get();
    }
    state->fill_mask(std::span(masks_).subspan(static_cast<size_t>(m) * words, words));
  }
}

namespace {

// The request of `id`: live in the scheduler or among `done`; null when neither has it (it ended since).
const Request* find_request(RequestId id, const Scheduler& scheduler, const std::vector<std::unique_ptr<Request>>& done) {
  if (const Request* r = scheduler.find(id)) return r;
  for (const std::unique_ptr<Request>& r : done) {
    if (r->id == id) return r.get();
  }
  return nullptr;
}

}  // namespace

void OutputProcessor::record(const ScheduledStep& step, Scheduler& scheduler,
                             const std::vector<std::unique_ptr<Request>>& done) {
  for (RequestId id : step.sample_ids) {
    const auto it = samples_.find(id);
    const Request* r = find_request(id, scheduler, done);
    if (it == samples_.end() || !r) continue;
    Sample& s = it->second;
    const auto ids = r->output_ids();
    const GenerateOptions& o = s.live->options;
    for (; s.recorded < r->num_output_tokens(); ++s.recorded) {
      const int32_t token = ids[static_cast<size_t>(s.recorded)];
      if (o.sampling.has_penalties()) s.history.add_output(token);
      if (s.ngram) s.ngram->append(token);
      // A stop id ends the output (the mask allowed it only where the output may end).
      const bool stop = std::find(r->params.stop_ids.begin(), r->params.stop_ids.end(), token) != r->params.stop_ids.end();
      if (s.constraint && !stop && !s.constraint->accept(token)) {
        // Only a token the mask did not come from (min_tokens banning the only allowed stop) gets here.
        scheduler.finish(id, FinishReason::kError,
                         fmt::format("token {} does not continue the output's constraint (structured outputs)", token));
        s.constraint.reset();
      }
      if (const auto& budget = o.thinking_budget) s.span_tokens = span_after(s.span_tokens, token, *budget);
    }
  }
}

void OutputProcessor::on_step(const ScheduledStep& step, StepOutputs& outputs, Scheduler& scheduler,
                              const std::vector<std::unique_ptr<Request>>& done, Outbox& out) {
  for (size_t i = 0; i < step.prompt_rows.size(); ++i) {
    const RequestId id = step.prompt_rows[i].request_id;
    if (const auto it = samples_.find(id); it != samples_.end()) {
      delta(id, it->second, out).prompt_logits.push_back(std::move(outputs.prompt_logits.at(i)));
    }
  }
  for (size_t row = 0; row < step.sample_ids.size(); ++row) {
    const RequestId id = step.sample_ids[row];
    if (row > 0 && step.sample_ids[row - 1] == id) continue;  // a verify step's later rows: done with its first
    const auto it = samples_.find(id);
    const Request* r = find_request(id, scheduler, done);
    if (it == samples_.end() || !r) continue;  // ended (and reported) since the step
    Sample& s = it->second;
    const GenerateOptions& o = s.live->options;
    if (s.emitted >= r->num_output_tokens()) continue;  // cancelled during the step: no new id
    SampleDelta& d = delta(id, s, out);
    const auto ids = r->output_ids();
    // A failure here (detokenization, stop strings, logprobs) ends this sample alone, with its reason.
    const char* what = "processed";
    try {
      // The step's ids of this sample came from its consecutive rows (several in a verify step), in order.
      for (size_t from = row; s.emitted < r->num_output_tokens(); ++s.emitted) {
        const int32_t token = ids[static_cast<size_t>(s.emitted)];
        d.ids.push_back(token);
        if (o.logprobs >= 0) {
          what = "given logprobs";
          TokenLogprobs lp = outputs.logprobs.at(from++);
          lp.top.resize(static_cast<size_t>(o.logprobs));
          d.logprobs.push_back(std::move(lp));
        }
        if (s.text.stopped()) continue;
        // The token that ends generation adds no text unless include_stop_str_in_output (as vLLM treats stop
        // ids), also where special tokens are spelled out: a chat's end-of-turn marker is not the answer's.
        if (!o.include_stop_str_in_output &&
            std::find(r->params.stop_ids.begin(), r->params.stop_ids.end(), token) != r->params.stop_ids.end()) {
          continue;
        }
        what = "detokenized";
        const TextStream::Piece piece = s.text.push(token, s.emitted + 1 >= o.min_tokens);
        d.text += piece.text;
        if (piece.stopped) scheduler.finish(id, FinishReason::kStop);  // no-op when it finished already
      }
    } catch (const std::exception& e) {
      s.emitted = r->num_output_tokens();
      scheduler.finish(id, FinishReason::kError,
                       fmt::format("token {} cannot be {}: {}", d.ids.empty() ? -1 : d.ids.back(), what, e.what()));
    }
  }
}

void OutputProcessor::on_finished(const std::vector<std::unique_ptr<Request>>& done, Outbox& out) {
  for (const std::unique_ptr<Request>& r : done) {
    const auto it = samples_.find(r->id);
    TIDE_CHECK(it != samples_.end());
    Sample& s = it->second;
    SampleDelta& d = delta(r->id, s, out);
    // A stop string that completed in the step where max_tokens was reached still ends with "stop".
    d.finish_reason = s.text.stopped() ? FinishReason::kStop : r->finish_reason;
    d.stopped_by_string = s.text.stopped();
    try {
      d.text += s.text.finish();
    } catch (const std::exception& e) {  // the text held back cannot be decoded: this sample fails alone
      d.finish_reason = FinishReason::kError;
      d.error = fmt::format("the end of the text cannot be detokenized: {}", e.what());
    }
    if (d.finish_reason == FinishReason::kError) {
      if (d.error.empty()) d.error = r->error;
      if (d.error.empty()) d.error = "the request ended with an error that gave no reason";
      log_info("request {} (sample {}) ended with an error after {} tokens: {}", s.live->label, s.index,
               r->num_output_tokens(), d.error);
    }
    d.num_output_tokens = r->num_output_tokens();
    d.cached_tokens = r->num_cached_tokens;
    d.num_preemptions = r->num_preemptions;
    std::vector<RequestId>& of_handle = by_handle_.at(s.live->handle->id());
    std::erase(of_handle, r->id);
    if (of_handle.empty()) by_handle_.erase(s.live->handle->id());
    samples_.erase(it);
  }
}

void OutputProcessor::fail_all(const std::string& error, Outbox& out) {
  if (!samples_.empty()) log_info("{} requests ended with an error: {}", samples_.size(), error);
  for (auto& [id, s] : samples_) {
    SampleDelta& d = delta(id, s, out);
    d.finish_reason = FinishReason::kError;
    d.error = error;
  }
  samples_.clear();
  by_handle_.clear();
}

}  // namespace tide
