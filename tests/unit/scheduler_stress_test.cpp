// Scheduler, randomised: a few hundred requests arriving over time (random lengths on shared prefixes,
// max_tokens, stop ids, min_tokens), aborts at random moments (waiting, running, with a step in flight),
// an arena small enough to force preemption, steps that fail and are retracted (the device out of memory),
// with and without a host tier, windows of different sizes, with and without speculative decoding (drafts from
// the reference output, some tokens corrupted, so verify steps accept a prefix and reject the rest). Every
// request must finish with the ids and reason it gets alone (an aborted one with a prefix of them), KV
// invariants hold after every step, admission is FCFS, and at the end no block is in use.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace tide {
namespace {

using namespace test;
using Tokens = std::vector<int32_t>;
constexpr int32_t kVocab = 64;

struct StressConfig {
  std::string name;
  uint32_t seed;
  int64_t block_size;
  std::vector<int64_t> windows;  // one layer group per window (0: global)
  bool host_tier;
  SchedulerOptions options;
  int64_t pool_sequences;  // the arena holds this many longest sequences (preemption below max_num_seqs)
  int64_t speculative = 0;  // drafted tokens per decoding request and step at most (0: no speculation)
};

std::ostream& operator<<(std::ostream& os, const StressConfig& c) { return os << c.name; }

class SchedulerStress : public testing::TestWithParam<StressConfig> {};

TEST_P(SchedulerStress, EveryRequestFinishesWithItsOwnIds) {
  const StressConfig cfg = GetParam();
  std::mt19937 rng(cfg.seed);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  constexpr int64_t kMaxPrompt = 60, kMaxTokens = 24;
  constexpr size_t kNumRequests = 300;

  const int64_t b = cfg.block_size, max_len = kMaxPrompt + kMaxTokens;
  const int64_t chunk = std::min(cfg.options.max_prefill_chunk, cfg.options.max_num_batched_tokens);
  const KvCacheManager probe(b, cfg.windows, KvArenaSpec{}, false);
  const auto need = static_cast<int32_t>(probe.max_arena_blocks(max_len, chunk) * cfg.pool_sequences);
  KvCacheManager kv(b, cfg.windows, KvArenaSpec{need, cfg.host_tier ? need : 0}, true);
  FakeModel model(kv, kVocab);
  SchedulerOptions options = cfg.options;
  options.max_model_len = max_len;
  Scheduler sched(kv, options);
  // Drafts: the request's own continuation (its output alone), each token replaced by a random one a third of
  // the time, of random length; the scheduler must keep exactly the drafts the model agrees with.
  std::map<RequestId, Tokens> continuations;
  if (cfg.speculative > 0) {
    sched.set_proposer([&](const Request& r, int64_t max_tokens, Tokens& draft) {
      auto [it, added] = continuations.try_emplace(r.id);
      if (added) it->second = reference_output(r.params, model.windows(), kVocab).ids;
      const auto done = static_cast<size_t>(r.num_output_tokens());
      for (int64_t n = uniform(0, max_tokens); n > 0 && done + draft.size() < it->second.size(); --n) {
        const int32_t right = it->second[done + draft.size()];
        draft.push_back(uniform(0, 2) == 0 ? static_cast<int32_t>(uniform(0, kVocab - 1)) : right);
      }
    }, cfg.speculative);
  }

  std::vector<Tokens> prefixes;
  for (int i = 0; i < 3; ++i) {
    Tokens t;
    for (int64_t n = uniform(b, 40); n > 0; --n) t.push_back(static_cast<int32_t>(uniform(0, kVocab - 1)));
    prefixes.push_back(t);
  }
  auto random_request = [&] {
    RequestParams p;
    if (uniform(0, 3) > 0) {
      const Tokens& prefix = prefixes[static_cast<size_t>(uniform(0, 2))];
      p.prompt.assign(prefix.begin(), prefix.begin() + uniform(1, static_cast<int64_t>(prefix.size())));
    }
    for (int64_t n = uniform(p.prompt.empty() ? 1 : 0, 20); n > 0; --n) p.prompt.push_back(static_cast<int32_t>(uniform(0, kVocab - 1)));
    p.max_tokens = uniform(1, kMaxTokens);
    for (int64_t n = uniform(0, 2); n > 0; --n) p.stop_ids.push_back(static_cast<int32_t>(uniform(0, kVocab - 1)));
    if (uniform(0, 4) == 0) p.min_tokens = uniform(0, p.max_tokens);
    return p;
  };

  std::map<RequestId, std::unique_ptr<Request>> finished;
  std::set<RequestId> aborted;  // abort() returned true
  std::map<RequestId, int64_t> first_scheduled;
  std::vector<RequestId> ids;
  int64_t steps = 0, cached_tokens = 0;
  auto try_abort = [&](RequestId id) {
    if (sched.abort(id)) aborted.insert(id);
  };
  while (ids.size() < kNumRequests || sched.has_unfinished()) {
    ASSERT_LT(steps, 20000) << "no progress: " << sched.num_running() << " running, " << sched.num_waiting() << " waiting";
    for (int64_t n = uniform(0, 3); n > 0 && ids.size() < kNumRequests; --n) ids.push_back(sched.add(random_request()));
    if (!ids.empty() && uniform(0, 24) == 0) try_abort(ids[static_cast<size_t>(uniform(0, static_cast<int64_t>(ids.size()) - 1))]);
    if (uniform(0, 19) == 0) {
      // A step whose forward fails: its copies ran, then it is retracted; half the time the newest request
      // is preempted as well (what the engine does when the device is out of memory).
      ScheduledStep failed = sched.schedule();
      if (!failed.empty() && uniform(0, 3) == 0) try_abort(failed.seqs.front().request_id);
      model.run_copies(failed);
      sched.retract(failed);
      if (uniform(0, 1) == 0) sched.preempt_newest();
      ASSERT_NO_THROW(kv.check_invariants(sched.live_sequences())) << "after a retracted step " << steps;
      for (auto& r : sched.take_finished()) finished[r->id] = std::move(r);
      ++steps;
      continue;
    }
    ScheduledStep step;
    ASSERT_TRUE(run_step(sched, kv, model, finished, &step, [&](const ScheduledStep& s) {
      if (!s.empty() && uniform(0, 24) == 0) try_abort(s.seqs[static_cast<size_t>(uniform(0, static_cast<int64_t>(s.seqs.size()) - 1))].request_id);
    })) << "step " << steps;
    for (const ScheduledSequence& s : step.seqs) first_scheduled.emplace(s.request_id, steps);
    ++steps;
  }

  // Starvation-free: first admissions happen in arrival order.
  int64_t last = -1;
  for (const auto& [id, step] : first_scheduled) {
    EXPECT_GE(step, last) << "request " << id << " overtaken";
    last = std::max(last, step);
  }
  ASSERT_EQ(finished.size(), kNumRequests);
  for (const auto& [id, r] : finished) {
    const Reference ref = reference_output(r->params, model.windows(), kVocab);
    const Tokens out(r->output_ids().begin(), r->output_ids().end());
    cached_tokens += r->num_cached_tokens;
    if (aborted.count(id)) {
      EXPECT_EQ(r->finish_reason, FinishReason::kAbort) << "request " << id;
      ASSERT_LE(out.size(), ref.ids.size()) << "request " << id;
      EXPECT_TRUE(std::equal(out.begin(), out.end(), ref.ids.begin())) << "request " << id;
    } else {
      EXPECT_EQ(r->finish_reason, ref.reason) << "request " << id << " " << r->error;
      EXPECT_EQ(out, ref.ids) << "request " << id;
    }
  }
  EXPECT_EQ(kv.pool().num_in_use(), 0);
  EXPECT_GT(sched.num_preemptions(), 0);
  if (cfg.speculative > 0) {
    EXPECT_GT(sched.num_accepted_tokens(), 0);
    EXPECT_LT(sched.num_accepted_tokens(), sched.num_draft_tokens());  // some drafts were rejected
    // Per draft position: a verify step drafts positions 0 .. d - 1 and accepts a prefix of them, so both
    // counts fall with the position, every verify step counts at position 0, and they sum to the totals.
    const std::vector<int64_t>& drafted = sched.drafted_per_position();
    const std::vector<int64_t>& accepted = sched.accepted_per_position();
    ASSERT_EQ(drafted.size(), static_cast<size_t>(cfg.speculative));
    ASSERT_EQ(accepted.size(), drafted.size());
    EXPECT_EQ(drafted[0], sched.num_verifies());
    int64_t drafted_sum = 0, accepted_sum = 0;
    for (size_t i = 0; i < drafted.size(); ++i) {
      EXPECT_LE(accepted[i], drafted[i]) << "position " << i;
      if (i > 0) {
        EXPECT_LE(drafted[i], drafted[i - 1]) << "position " << i;
        EXPECT_LE(accepted[i], accepted[i - 1]) << "position " << i;
      }
      drafted_sum += drafted[i];
      accepted_sum += accepted[i];
    }
    EXPECT_EQ(drafted_sum, sched.num_draft_tokens());
    EXPECT_EQ(accepted_sum, sched.num_accepted_tokens());
    EXPECT_LT(accepted[0], drafted[0]);  // a third of the drafted tokens are wrong
  } else {
    EXPECT_EQ(sched.num_draft_tokens(), 0);
  }
  EXPECT_GT(cached_tokens, 0);
  EXPECT_FALSE(aborted.empty());
  if (cfg.host_tier) {
    EXPECT_GT(model.num_to_host, 0);    // evictions went to the host tier ...
    EXPECT_GT(model.num_to_device, 0);  // ... and hits were served from it
  }
}

SchedulerOptions opts(int64_t tokens, int64_t seqs, int64_t chunk) { return SchedulerOptions{tokens, seqs, chunk, 0}; }

INSTANTIATE_TEST_SUITE_P(
    Configs, SchedulerStress,
    testing::Values(StressConfig{"GlobalOnly", 11, 4, {0}, false, opts(64, 8, 16), 2},
                    StressConfig{"SlidingAndGlobal", 12, 4, {9, 0}, false, opts(48, 12, 16), 3},
                    StressConfig{"SlidingAndGlobalHostTier", 13, 4, {9, 0}, true, opts(48, 12, 16), 3},
                    StressConfig{"TwoWindowsAndGlobal", 14, 3, {5, 17, 0}, false, opts(32, 6, 7), 2},
                    StressConfig{"BlockLargerThanWindow", 15, 8, {5, 0}, true, opts(40, 10, 12), 2},
                    StressConfig{"TightBudgets", 16, 2, {6, 0}, false, opts(9, 8, 5), 2},
                    StressConfig{"SiblingGroupsHostTier", 17, 4, {9, 9, 9, 0}, true, opts(48, 12, 16), 3},
                    StressConfig{"TwoGlobalGroups", 18, 3, {7, 7, 0, 0}, false, opts(32, 8, 8), 2},
                    StressConfig{"SpeculativeSlidingAndGlobal", 19, 4, {9, 0}, false, opts(48, 12, 16), 3, 4},
                    StressConfig{"SpeculativeHostTier", 20, 8, {5, 0}, true, opts(40, 10, 12), 2, 6},
                    StressConfig{"SpeculativeTightBudgets", 21, 2, {6, 0}, false, opts(9, 8, 5), 2, 3},
                    StressConfig{"SpeculativeTwoWindows", 22, 3, {5, 17, 0}, false, opts(32, 6, 7), 2, 16}),
    [](const testing::TestParamInfo<StressConfig>& info) { return info.param.name; });

}  // namespace
}  // namespace tide
