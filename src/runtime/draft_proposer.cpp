#include "runtime/draft_proposer.h"

#include <algorithm>
#include <unordered_set>

#include "core/error.h"

namespace tide {

DraftProposer::DraftProposer(ModelExecutor& executor, KvCacheManager& kv, int64_t max_step_tokens, int64_t max_chunk)
    : executor_(executor),
      kv_(kv),
      max_step_tokens_(max_step_tokens),
      max_chunk_(max_chunk),
      max_positions_(executor.draft()->config().max_position_embeddings) {
  TIDE_CHECK(max_step_tokens > 0 && max_chunk > 0);
}

void DraftProposer::sync(Sequence& s, std::span<const int32_t> tokens) {
  // The newest id stays uncommitted even when the draft computed it (a step that did not run leaves the
  // request where it was): the next round computes it again, for the logits of its first draft.
  const auto c = static_cast<size_t>(s.kv.num_computed());
  size_t m = 0;
  while (m < s.pending.size() && c + m + 1 < tokens.size() && s.pending[m] == tokens[c + m]) ++m;
  if (m > 0) kv_.commit(s.kv, std::span<const int32_t>(s.pending).first(m));
  kv_.truncate(s.kv);
  s.pending.clear();
}

void DraftProposer::drop(Sequence& s) {
  if (s.admitted) kv_.free(s.kv);
  s = Sequence{};
}

void DraftProposer::release(RequestId id) {
  const auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  drop(it->second);
  seqs_.erase(it);
}

void DraftProposer::release_all() {
  for (auto& [id, s] : seqs_) drop(s);
  seqs_.clear();
  logits_ = Tensor{};
  logits_used_ = 0;
}

bool DraftProposer::reclaim() {
  Sequence* victim = nullptr;
  for (auto& [id, s] : seqs_) {
    if (s.admitted && (victim == nullptr || s.kv.num_table_blocks() > victim->kv.num_table_blocks())) victim = &s;
  }
  if (victim == nullptr) return false;
  kv_.free(victim->kv);
  victim->admitted = false;
  victim->pending.clear();
  ++num_reclaims_;
  return true;
}

void DraftProposer::skip_round() {
  for (auto& [id, s] : seqs_) {
    s.draft.clear();
    s.logits_rows.clear();
  }
  logits_ = Tensor{};
  logits_used_ = 0;
}

void DraftProposer::take(RequestId id, int64_t max_tokens, std::vector<int32_t>& draft) const {
  draft.clear();
  const auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  const std::vector<int32_t>& d = it->second.draft;
  draft.assign(d.begin(), d.begin() + std::min<ptrdiff_t>(static_cast<ptrdiff_t>(d.size()), std::max<int64_t>(0, max_tokens)));
}

std::vector<const SequenceKv*> DraftProposer::live_sequences() const {
  std::vector<const SequenceKv*> out;
  for (const auto& [id, s] : seqs_) out.push_back(&s.kv);
  return out;
}

const SequenceKv* DraftProposer::sequence(RequestId id) const {
  const auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second.kv;
}

const DraftSampling* DraftProposer::sampling(const ScheduledStep& step, const Scheduler& scheduler,
                                             const std::function<SamplingRow(RequestId, uint64_t)>& acceptance_row) {
  if (logits_.data == nullptr) return nullptr;
  const auto num = static_cast<size_t>(logits_.dim(0));
  // Rows of logits_ no row checks keep valid placeholders.
  check_rows_.assign(num, SamplingRow{1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0});
  check_ids_.assign(num, 0);
  check_index_.assign(step.sample_ids.size(), -1);
  bool any = false;
  int64_t i = 0;
  for (size_t row = 0; row < step.sample_ids.size(); ++row) {
    const RequestId id = step.sample_ids[row];
    i = row > 0 && step.sample_ids[row - 1] == id ? i + 1 : 0;  // a verify step's rows are consecutive
    const Request& r = *scheduler.find(id);
    const auto it = seqs_.find(id);
    if (i >= static_cast<int64_t>(r.draft.size()) || it == seqs_.end() ||
        i >= static_cast<int64_t>(it->second.logits_rows.size())) {
      continue;
    }
    const auto j = static_cast<size_t>(it->second.logits_rows[static_cast<size_t>(i)]);
    check_rows_[j] = acceptance_row(id, static_cast<uint64_t>(r.num_output_tokens() + i));
    check_ids_[j] = r.draft[static_cast<size_t>(i)];
    check_index_[row] = static_cast<int32_t>(j);
    any = true;
  }
  sampling_ = DraftSampling{logits_, check_rows_, check_ids_, check_index_};
  return any ? &sampling_ : nullptr;
}

int64_t DraftProposer::step(const ForwardBatch& batch, std::span<const SamplingRow> rows, bool keep, Tensor ids,
                            const Tensor* token_ids) {
  ++num_steps_;
  num_tokens_ += static_cast<int64_t>(batch.token_ids.size());
  const int64_t first = logits_used_;
  Tensor kept;
  if (keep) {
    const auto n = static_cast<int64_t>(rows.size());
    kept = logits_.slice_rows(logits_used_, logits_used_ + n);
    logits_used_ += n;
  }
  executor_.draft_step(batch, rows, kept, ids, token_ids);
  return first;
}

void DraftProposer::run(std::span<const DraftRequest> requests) {
  skip_round();
  std::unordered_set<RequestId> present;
  for (const DraftRequest& r : requests) present.insert(r.id);
  for (auto it = seqs_.begin(); it != seqs_.end();) {
    if (present.count(it->first) == 0) {
      drop(it->second);
      it = seqs_.erase(it);
    } else {
      ++it;
    }
  }

  // What each sequence computes: positions start .. n - 1 to catch up (the newest id included), then drafted
  // tokens d_1 .. d_{drafts - 1} at n .. n + drafts - 2 (d_drafts is sampled, never computed).
  struct Entry {
    const DraftRequest* request;
    Sequence* seq;
    int64_t start;   // the draft's computed positions before this round
    int64_t catch_up;
    int64_t n;       // the request's tokens
    int64_t drafts;  // 0: catching up only
  };
  std::vector<Entry> entries;
  int64_t budget = max_step_tokens_;
  int64_t most_drafts = 0;
  for (const DraftRequest& r : requests) {
    TIDE_CHECK(r.max_drafts >= 1 && !r.tokens.empty());
    Sequence& s = seqs_[r.id];
    const auto n = static_cast<int64_t>(r.tokens.size());
    if (n > max_positions_) {  // beyond the draft's length
      drop(s);
      continue;
    }
    if (s.admitted) {
      sync(s, r.tokens);
    } else {
      // A prefix found on the host tier of a shared arena needs free blocks to come back: none, no draft.
      if (kv_.num_admissible_tokens(r.tokens, 1) == 0) continue;
      kv_.admit(s.kv, r.tokens);
      s.admitted = true;
    }
    const int64_t start = s.kv.num_computed();
    TIDE_CHECK(start < n);
    int64_t catch_up = std::min({n - start, max_chunk_, budget});
    if (catch_up <= 0) continue;
    int64_t drafts = catch_up == n - start ? std::min(r.max_drafts, max_positions_ - n + 1) : 0;
    const int64_t fit = kv_.num_appendable_tokens(s.kv, catch_up + std::max<int64_t>(0, drafts - 1), keep_free_);
    if (fit < catch_up) {
      catch_up = fit;
      drafts = 0;
    } else {
      drafts = std::min(drafts, fit - catch_up + 1);
    }
    if (catch_up == 0) continue;  // the draft's blocks are all taken: no draft this step
    kv_.append(s.kv, catch_up + std::max<int64_t>(0, drafts - 1));
    s.pending.assign(r.tokens.begin() + start, r.tokens.begin() + start + catch_up);
    budget -= catch_up;
    most_drafts = std::max(most_drafts, drafts);
    entries.push_back(Entry{&r, &s, start, catch_up, n, drafts});
  }
  // In a shared arena the allocations may have evicted cached blocks to the host tier and admissions found
  // prefixes there: those copies run before the draft writes into the blocks.
  if (std::vector<BlockCopy> copies = kv_.take_copies(); !copies.empty()) {
    try {
      executor_.copy_blocks(copies);
    } catch (const std::exception& e) {
      release_all();
      throw DraftCopyError(fmt::format("the KV cache's block copies for the draft failed: {}", e.what()));
    }
  }
  if (entries.empty()) return;
  // When some draft is drawn at a temperature, every draft step keeps its logits, a row per draft in the
  // steps' order (rows of argmax drafts are kept too, unused).
  bool sampled = false;
  int64_t kept_rows = 0;
  for (const Entry& e : entries) {
    kept_rows += e.drafts;
    sampled = sampled || (e.drafts > 0 && e.request->row.temperature > 0);
  }
  if (sampled) {
    logits_ = executor_.backend().alloc_uninitialized(DType::kF32, Shape{kept_rows, executor_.draft()->config().vocab_size});
  }
  // The sampling row of draft j of `e`.
  const auto draw = [&](const Entry& e, int64_t j) {
    SamplingRow row = e.request->row;
    row.counter += static_cast<uint64_t>(j);
    rows_.push_back(row);
  };
  // When every sequence that drafts drafts as many tokens, the steps after the first have the same rows in the
  // same order, and each takes its token ids from the previous step's ids on the device: the host queues all
  // the steps and waits once, for all the drafts. Otherwise it downloads each step's ids to build the next.
  int64_t rows_per_step = 0;
  bool chained = true;
  for (const Entry& e : entries) {
    if (e.drafts == 0) continue;
    ++rows_per_step;
    chained = chained && e.drafts == most_drafts;
  }
  const int64_t id_rows = std::max<int64_t>(rows_per_step, 1);  // a step of catching up alone samples one row
  const Tensor ids = executor_.backend().alloc_uninitialized(DType::kI32, Shape{std::max<int64_t>(most_drafts, 1) * id_rows});
  // The ids of step j's `n` rows.
  const auto ids_of = [&](int64_t j, int64_t n) { return ids.slice_rows(j * id_rows, j * id_rows + n); };
  std::vector<int32_t> host_ids;
  std::vector<int64_t> first_rows;  // per step, its first row of logits_
  // Records draft j of every entry with more than j drafts from the step's ids on the host.
  const auto record = [&](int64_t j, const int32_t* step_ids) {
    size_t row = 0;
    for (const Entry& e : entries) {
      if (e.drafts <= j) continue;
      e.seq->draft.push_back(step_ids[row]);
      if (e.request->row.temperature > 0) {
        e.seq->logits_rows.push_back(static_cast<int32_t>(first_rows[static_cast<size_t>(j)] + static_cast<int64_t>(row)));
      }
      if (j + 1 < e.drafts) e.seq->pending.push_back(step_ids[row]);  // computed by the next step
      ++row;
    }
  };
  const auto download_step = [&](int64_t j, int64_t num_rows) {
    host_ids.resize(static_cast<size_t>(num_rows));
    executor_.backend().download(ids_of(j, num_rows), host_ids.data());
    record(j, host_ids.data());
  };

  try {
    ForwardBatch batch;
    rows_.clear();
    for (const Entry& e : entries) {
      const auto offset = static_cast<int32_t>(batch.token_ids.size());
      batch.token_ids.insert(batch.token_ids.end(), e.seq->pending.begin(), e.seq->pending.end());
      ForwardSequence fs{e.start, e.catch_up, {}};
      for (const std::vector<int32_t>& table : e.seq->kv.block_tables) fs.block_tables.emplace_back(table);
      batch.seqs.push_back(std::move(fs));
      if (e.drafts > 0) {
        batch.logit_indices.push_back(offset + static_cast<int32_t>(e.catch_up - 1));
        draw(e, 0);
      }
    }
    // A step of catching up alone still computes one row (its id is not used).
    if (batch.logit_indices.empty()) {
      batch.logit_indices.push_back(static_cast<int32_t>(batch.token_ids.size() - 1));
      rows_.emplace_back();
      step(batch, rows_, false, ids_of(0, 1), nullptr);
      return;
    }
    first_rows.push_back(step(batch, rows_, sampled, ids_of(0, rows_per_step), nullptr));
    if (!chained) download_step(0, rows_per_step);
    for (int64_t j = 1; j < most_drafts; ++j) {
      batch = ForwardBatch{};
      rows_.clear();
      for (const Entry& e : entries) {
        if (e.drafts <= j) continue;
        batch.logit_indices.push_back(static_cast<int32_t>(batch.token_ids.size()));
        // Chained: a placeholder, the step reads the previous step's ids on the device.
        batch.token_ids.push_back(chained ? 0 : e.seq->draft[static_cast<size_t>(j - 1)]);
        ForwardSequence fs{e.n + j - 1, 1, {}};
        for (const std::vector<int32_t>& table : e.seq->kv.block_tables) fs.block_tables.emplace_back(table);
        batch.seqs.push_back(std::move(fs));
        draw(e, j);
      }
      const auto num_rows = static_cast<int64_t>(rows_.size());
      const Tensor previous = ids_of(j - 1, num_rows);
      first_rows.push_back(step(batch, rows_, sampled, ids_of(j, num_rows), chained ? &previous : nullptr));
      if (!chained) download_step(j, num_rows);
    }
    if (chained) {
      host_ids.resize(static_cast<size_t>(ids.numel()));
      executor_.backend().download(ids, host_ids.data());
      for (int64_t j = 0; j < most_drafts; ++j) record(j, host_ids.data() + j * id_rows);
    }
    TIDE_CHECK(!sampled || logits_used_ == kept_rows);
  } catch (...) {
    release_all();
    throw;
  }
}

}  // namespace tide
