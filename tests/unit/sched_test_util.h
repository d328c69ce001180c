// Helpers for the scheduler tests. FakeModel is a deterministic stand-in for the model that works through
// the step's block tables the way kernels do: the K/V "computed" at position p is h_p = mix(h_{p-1}, token_p),
// where h_{p-1} is read back from the simulated arena, and the id sampled after position p hashes every
// value p's attention reads (its window in each layer group). reference_output runs the same function on one
// sequence alone, without any cache. So any mistake in what the scheduler computes, commits, reuses, copies
// or recomputes after a preemption changes the ids, not only a count.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache_manager.h"
#include "sched/scheduler.h"

namespace tide::test {

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h | 1;  // never 0, the value of memory nobody wrote
}
inline constexpr uint64_t kSeedValue = 0x6b76636163686521ull;

// The first position whose K/V a token at `pos` reads in a group of `window` (0: global).
inline int64_t first_read(int64_t window, int64_t pos) { return window == 0 ? 0 : std::max<int64_t>(0, pos - window + 1); }

// The id sampled after the token at `pos`, from the values its attention reads in every group.
inline int32_t pick(const std::vector<int64_t>& windows, int64_t pos, int32_t vocab, auto&& value_at) {
  uint64_t acc = kSeedValue;
  for (size_t p = 0; p < windows.size(); ++p) {
    for (int64_t q = first_read(windows[p], pos); q <= pos; ++q) acc = mix(acc, value_at(p, q));
  }
  return static_cast<int32_t>(acc % static_cast<uint64_t>(vocab));
}

struct Reference {
  std::vector<int32_t> ids;
  FinishReason reason = FinishReason::kLength;
};

// What `params` generates on one sequence alone, with no cache: the output every schedule must reproduce.
inline Reference reference_output(const RequestParams& params, const std::vector<int64_t>& windows, int32_t vocab) {
  std::vector<int32_t> tokens = params.prompt;
  std::vector<uint64_t> h;
  Reference ref;
  for (size_t i = 0;; ++i) {
    h.push_back(mix(i == 0 ? kSeedValue : h.back(), static_cast<uint64_t>(tokens[i])));
    if (i + 1 < tokens.size()) continue;
    const int32_t id = pick(windows, static_cast<int64_t>(i), vocab, [&](size_t, int64_t q) { return h[static_cast<size_t>(q)]; });
    tokens.push_back(id);
    ref.ids.push_back(id);
    const auto n = static_cast<int64_t>(ref.ids.size());
    if (n > params.min_tokens && std::count(params.stop_ids.begin(), params.stop_ids.end(), id) > 0) {
      ref.reason = FinishReason::kStop;
      return ref;
    }
    if (n >= params.max_tokens) return ref;
  }
}

class FakeModel {
 public:
  FakeModel(const KvCacheManager& kv, int32_t vocab)
      : block_size_(kv.block_size()),
        vocab_(vocab),
        device_(static_cast<size_t>(kv.pool().num_blocks() * block_size_), 0),
        host_(static_cast<size_t>(kv.pool().num_host_blocks() * block_size_), 0) {
    for (int g = 0; g < kv.num_groups(); ++g) windows_.push_back(kv.window(g));
  }
  const std::vector<int64_t>& windows() const { return windows_; }

  // Runs `step` (its copies, then its batch) and appends one id per sample row to `sampled`.
  testing::AssertionResult run(const KvCacheManager& kv, const ScheduledStep& step, std::vector<int32_t>& sampled) {
    run_copies(step);
    return run_batch(kv, step, sampled);
  }

  // The step's block copies alone (a step whose forward then fails still ran them).
  void run_copies(const ScheduledStep& step) {
    for (const BlockCopy& c : step.copies) {
      uint64_t* dev = &device_[static_cast<size_t>(c.device_block * block_size_)];
      uint64_t* host = &host_[static_cast<size_t>(c.host_block * block_size_)];
      if (c.direction == BlockCopy::Direction::kToHost) {
        std::copy(dev, dev + block_size_, host);
        ++num_to_host;
      } else {
        std::copy(host, host + block_size_, dev);
        ++num_to_device;
      }
    }
  }

  testing::AssertionResult run_batch(const KvCacheManager& kv, const ScheduledStep& step, std::vector<int32_t>& sampled) {
    const ForwardBatch& batch = step.batch;
    size_t offset = 0;
    std::set<int32_t> logit_rows(batch.logit_indices.begin(), batch.logit_indices.end());
    for (const ForwardSequence& s : batch.seqs) {
      for (int64_t t = 0; t < s.num_tokens; ++t) {
        const int64_t pos = s.start_pos + t;
        uint64_t prev = kSeedValue;
        if (pos > 0) {  // h_{pos-1} from every group that holds it; they must agree
          bool found = false;
          for (size_t p = 0; p < windows_.size(); ++p) {
            if (first_read(windows_[p], pos) > pos - 1) continue;
            uint64_t v = 0;
            if (auto r = read(s, p, pos - 1, v); !r) return r;
            if (found && v != prev) return testing::AssertionFailure() << "groups disagree at position " << pos - 1;
            prev = v;
            found = true;
          }
          if (!found) return testing::AssertionFailure() << "no group holds position " << pos - 1;
        }
        const uint64_t h = mix(prev, static_cast<uint64_t>(batch.token_ids[offset + static_cast<size_t>(t)]));
        for (size_t p = 0; p < windows_.size(); ++p) {
          if (auto r = write(kv, s, p, pos, h); !r) return r;
        }
        if (!logit_rows.count(static_cast<int32_t>(offset + static_cast<size_t>(t)))) continue;
        testing::AssertionResult ok = testing::AssertionSuccess();
        const int32_t id = pick(windows_, pos, vocab_, [&](size_t p, int64_t q) {
          uint64_t v = 0;
          if (auto r = read(s, p, q, v); !r) ok = r;
          return v;
        });
        if (!ok) return ok;
        sampled.push_back(id);
      }
      offset += static_cast<size_t>(s.num_tokens);
    }
    if (sampled.size() != batch.logit_indices.size()) return testing::AssertionFailure() << "logit rows out of order";
    return testing::AssertionSuccess();
  }

  int64_t num_to_host = 0;    // block copies run, by direction
  int64_t num_to_device = 0;

 private:
  testing::AssertionResult slot(const ForwardSequence& s, size_t p, int64_t pos, size_t& index) const {
    const std::span<const int32_t> table = s.block_tables[p];
    const auto j = static_cast<size_t>(pos / block_size_);
    if (j >= table.size() || table[j] == kNullBlock) {
      return testing::AssertionFailure() << "group " << p << ": position " << pos << " has no block";
    }
    index = static_cast<size_t>(table[j] * block_size_ + pos % block_size_);
    return testing::AssertionSuccess();
  }
  testing::AssertionResult read(const ForwardSequence& s, size_t p, int64_t pos, uint64_t& v) const {
    size_t i = 0;
    if (auto r = slot(s, p, pos, i); !r) return r;
    v = device_[i];
    return testing::AssertionSuccess();
  }
  testing::AssertionResult write(const KvCacheManager& kv, const ForwardSequence& s, size_t p, int64_t pos, uint64_t v) {
    size_t i = 0;
    if (auto r = slot(s, p, pos, i); !r) return r;
    const int32_t block = s.block_tables[p][static_cast<size_t>(pos / block_size_)];
    if (kv.pool().refcount(block) != 1 || kv.pool().group_of(block) != static_cast<int>(p)) {
      return testing::AssertionFailure() << "group " << p << ": position " << pos << " written into shared block "
                                         << block << " (or another group's)";
    }
    device_[i] = v;
    return testing::AssertionSuccess();
  }

  int64_t block_size_;
  int32_t vocab_;
  std::vector<int64_t> windows_;
  std::vector<uint64_t> device_;  // [block * B + offset] of the arena
  std::vector<uint64_t> host_;    // [slot * B + offset]
};

// One engine-loop iteration with checks: schedule, budgets, invariants, `during` (the step in flight), run,
// update, invariants. Finished requests are moved into `finished` (by id); the step into `out_step`.
inline testing::AssertionResult run_step(Scheduler& sched, KvCacheManager& kv, FakeModel& model,
                                         std::map<RequestId, std::unique_ptr<Request>>& finished,
                                         ScheduledStep* out_step = nullptr,
                                         const std::function<void(const ScheduledStep&)>& during = {}) {
  const SchedulerOptions& o = sched.options();
  ScheduledStep step = sched.schedule();
  if (step.num_tokens() > o.max_num_batched_tokens) return testing::AssertionFailure() << "token budget exceeded";
  if (static_cast<int64_t>(step.seqs.size()) > o.max_num_seqs || static_cast<int64_t>(sched.num_running()) > o.max_num_seqs) {
    return testing::AssertionFailure() << "sequence budget exceeded";
  }
  std::set<RequestId> seen;
  for (const ScheduledSequence& s : step.seqs) {
    if (!seen.insert(s.request_id).second) return testing::AssertionFailure() << "request scheduled twice";
    if (s.num_tokens < 1 || s.num_tokens > o.max_prefill_chunk) return testing::AssertionFailure() << "chunk " << s.num_tokens;
  }
  if (step.sample_ids.size() != step.batch.logit_indices.size()) return testing::AssertionFailure() << "sample rows";
  try {
    kv.check_invariants(sched.live_sequences());
  } catch (const Error& e) {
    return testing::AssertionFailure() << "after schedule: " << e.what();
  }
  if (during) during(step);  // e.g. aborts while the step is in flight
  std::vector<int32_t> sampled;
  if (auto r = model.run(kv, step, sampled); !r) return r << " (step " << step.step_id << ")";
  sched.update(step, sampled);
  try {
    kv.check_invariants(sched.live_sequences());
  } catch (const Error& e) {
    return testing::AssertionFailure() << "after update: " << e.what();
  }
  for (auto& r : sched.take_finished()) finished[r->id] = std::move(r);
  if (out_step) *out_step = std::move(step);
  return testing::AssertionSuccess();
}

}  // namespace tide::test
