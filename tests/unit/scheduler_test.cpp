// Scheduler: admission checks, FCFS, budgets, chunked prefill, decode-first batches, prefix reuse,
// preemption by recompute, stop / length / abort. Every test runs the FakeModel of sched_test_util.h, so the
// ids a schedule produces are compared with what one sequence alone produces.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <numeric>
#include <vector>

#include "sched/scheduler.h"
#include "sched_test_util.h"

namespace tide {
namespace {

using namespace test;
using Tokens = std::vector<int32_t>;
constexpr int32_t kVocab = 64;

Tokens tokens(int64_t n, int32_t first) {
  Tokens t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// A KV cache, the fake model on it and a scheduler, with the requests finished so far.
struct Bench {
  KvCacheManager kv;
  FakeModel model;
  Scheduler sched;
  std::map<RequestId, std::unique_ptr<Request>> finished;

  Bench(int64_t block_size, std::vector<int64_t> windows, int32_t num_blocks, SchedulerOptions options,
        bool prefix_caching = true)
      : kv(block_size, std::move(windows), KvArenaSpec{num_blocks, 0}, prefix_caching), model(kv, kVocab),
        sched(kv, options) {}

  testing::AssertionResult step(ScheduledStep* out = nullptr) { return run_step(sched, kv, model, finished, out); }
  testing::AssertionResult run_all(int max_steps = 10000) {
    for (int i = 0; i < max_steps && sched.has_unfinished(); ++i) {
      if (auto r = step(); !r) return r;
    }
    if (sched.has_unfinished()) return testing::AssertionFailure() << "not finished after " << max_steps << " steps";
    return testing::AssertionSuccess();
  }
  // The finished request's ids and reason equal what it produces alone.
  testing::AssertionResult matches_reference(RequestId id) {
    const auto it = finished.find(id);
    if (it == finished.end()) return testing::AssertionFailure() << "request " << id << " not finished";
    const Request& r = *it->second;
    const Reference ref = reference_output(r.params, model.windows(), kVocab);
    const Tokens out(r.output_ids().begin(), r.output_ids().end());
    if (out != ref.ids || r.finish_reason != ref.reason) {
      return testing::AssertionFailure() << "request " << id << ": " << out.size() << " ids (" << to_string(r.finish_reason)
                                         << "), alone " << ref.ids.size() << " (" << to_string(ref.reason) << ")";
    }
    return testing::AssertionSuccess();
  }
  bool pools_free() const { return kv.pool().num_in_use() == 0; }
};

RequestParams req(Tokens prompt, int64_t max_tokens, int64_t min_tokens = 0, Tokens stop_ids = {}) {
  return RequestParams{std::move(prompt), max_tokens, min_tokens, std::move(stop_ids)};
}

SchedulerOptions options(int64_t tokens, int64_t seqs, int64_t chunk, int64_t max_len = 1000) {
  return SchedulerOptions{tokens, seqs, chunk, max_len};
}

// ---  admission

TEST(Scheduler, RefusesRequestsThatCanNeverRun) {
  Bench b(4, {0}, 8, options(64, 4, 16, 40));
  EXPECT_THROW(b.sched.add(req(Tokens{}, 4)), Error);
  EXPECT_THROW(b.sched.add(req(tokens(10, 1), -1)), Error);
  try {
    b.sched.add(req(tokens(30, 1), 11));
    ADD_FAILURE() << "prompt + max_tokens beyond max_model_len was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("maximum length"), std::string::npos) << e.what();
  }
  try {
    b.sched.add(req(tokens(30, 1), 3));  // 33 positions need 9 blocks of 4; the pool has 8
    ADD_FAILURE() << "a request larger than the pools was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(b.sched.has_unfinished());
  const RequestId id = b.sched.add(req(tokens(30, 1), 2));  // 32 positions: exactly the pool
  EXPECT_EQ(id, 1u);  // refused requests take no id
  EXPECT_TRUE(b.run_all());
  EXPECT_TRUE(b.matches_reference(id));
}

TEST(Scheduler, ZeroMaxTokensFinishesAtOnce) {
  Bench b(4, {0}, 8, options(64, 4, 16));
  const RequestId id = b.sched.add(req(tokens(5, 1), 0));
  EXPECT_FALSE(b.sched.has_unfinished());
  auto done = b.sched.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->id, id);
  EXPECT_EQ(done[0]->finish_reason, FinishReason::kLength);
}

// ---  chunks, budgets, order

TEST(Scheduler, ChunkedPrefillSplitsALongPromptAndOnlyTheLastChunkSamples) {
  Bench b(4, {6, 0}, 80, options(100, 4, 16));
  const RequestId id = b.sched.add(req(tokens(50, 3), 4));
  std::vector<int64_t> chunks;
  for (int i = 0; i < 4; ++i) {
    ScheduledStep step;
    ASSERT_TRUE(b.step(&step));
    ASSERT_EQ(step.seqs.size(), 1u);
    chunks.push_back(step.seqs[0].num_tokens);
    EXPECT_EQ(step.seqs[0].start_pos, 16 * i);
    EXPECT_EQ(step.seqs[0].samples, i == 3);
    if (i == 3) {
      ASSERT_EQ(step.batch.logit_indices, std::vector<int32_t>{1});  // the last of the chunk's 2 tokens
      EXPECT_EQ(step.sample_ids, std::vector<RequestId>{id});
    } else {
      EXPECT_TRUE(step.batch.logit_indices.empty());
    }
  }
  EXPECT_EQ(chunks, (std::vector<int64_t>{16, 16, 16, 2}));
  ScheduledStep decode;
  ASSERT_TRUE(b.step(&decode));
  ASSERT_EQ(decode.seqs.size(), 1u);
  EXPECT_EQ(decode.seqs[0].start_pos, 50);
  EXPECT_EQ(decode.seqs[0].num_tokens, 1);
  ASSERT_TRUE(b.run_all());
  EXPECT_TRUE(b.matches_reference(id));
  EXPECT_TRUE(b.pools_free());
}

TEST(Scheduler, DecodesComeFirstThenPrefillFillsTheTokenBudget) {
  Bench b(4, {0}, 64, options(10, 4, 16));
  const RequestId a = b.sched.add(req(tokens(8, 1), 20));
  const RequestId c = b.sched.add(req(tokens(6, 30), 20));
  ASSERT_TRUE(b.step());  // a: 8 tokens, c: the 2 left in the budget
  ASSERT_TRUE(b.step());  // a decodes; c: 4 more (its last chunk)
  const RequestId d = b.sched.add(req(tokens(40, 9), 5));
  ScheduledStep step;
  ASSERT_TRUE(b.step(&step));
  ASSERT_EQ(step.seqs.size(), 3u);
  EXPECT_EQ(step.seqs[0].request_id, a);
  EXPECT_EQ(step.seqs[1].request_id, c);
  EXPECT_EQ(step.seqs[0].num_tokens, 1);
  EXPECT_EQ(step.seqs[1].num_tokens, 1);
  EXPECT_EQ(step.seqs[2].request_id, d);
  EXPECT_EQ(step.seqs[2].num_tokens, 8);  // 10 - 2 decodes
  EXPECT_EQ(step.batch.logit_indices, (std::vector<int32_t>{0, 1}));  // d's chunk samples nothing
  ASSERT_TRUE(b.run_all());
  for (RequestId id : {a, c, d}) EXPECT_TRUE(b.matches_reference(id));
}

TEST(Scheduler, AdmitsInArrivalOrderWithinTheSequenceBudget) {
  Bench b(4, {0}, 64, options(64, 2, 16));
  std::vector<RequestId> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(b.sched.add(req(tokens(5 + 3 * i, 10 * i), 3 + (i % 3) * 4)));
  std::map<RequestId, int> first_step;
  for (int s = 0; b.sched.has_unfinished(); ++s) {
    ASSERT_LT(s, 1000);
    ScheduledStep step;
    ASSERT_TRUE(b.step(&step));
    EXPECT_LE(step.seqs.size(), 2u);
    for (const ScheduledSequence& q : step.seqs) first_step.emplace(q.request_id, s);
  }
  for (size_t i = 1; i < ids.size(); ++i) EXPECT_LE(first_step[ids[i - 1]], first_step[ids[i]]) << i;
  EXPECT_GT(first_step[ids[2]], 0);  // the third waited for a free slot
  for (RequestId id : ids) EXPECT_TRUE(b.matches_reference(id));
}

// ---  prefix reuse

TEST(Scheduler, PrefixReuseReducesTheTokensComputed) {
  Bench b(4, {7, 0}, 128, options(64, 4, 16));
  const Tokens shared = tokens(40, 100);
  const RequestId first = b.sched.add(req(shared, 3));
  ASSERT_TRUE(b.run_all());
  Tokens prompt = shared;
  prompt.insert(prompt.end(), {5, 6, 7});
  const RequestId second = b.sched.add(req(prompt, 3));
  int64_t computed = 0;
  while (b.sched.has_unfinished()) {
    ScheduledStep step;
    ASSERT_TRUE(b.step(&step));
    computed += step.num_tokens();
  }
  EXPECT_EQ(b.finished[second]->num_cached_tokens, 40);
  EXPECT_EQ(computed, 3 + 2);  // the 3 new prompt tokens, then 2 decodes
  EXPECT_TRUE(b.matches_reference(first));
  EXPECT_TRUE(b.matches_reference(second));
  EXPECT_TRUE(b.pools_free());
}

TEST(Scheduler, SamplesOfAPromptWaitForItsLeaderAndReuseItsBlocks) {
  Bench b(4, {7, 0}, 128, options(64, 8, 8));
  const Tokens prompt = tokens(30, 200);  // 4 chunks of 8
  const RequestId leader = b.sched.add(req(prompt, 5));
  RequestParams follower = req(prompt, 5);
  follower.prompt_leader = leader;
  const RequestId second = b.sched.add(follower);
  const RequestId later = b.sched.add(req(tokens(5, 900), 3));  // FCFS: not ahead of the follower
  int64_t computed = 0;
  bool follower_admitted_early = false;
  while (b.sched.has_unfinished()) {
    const Request* l = b.sched.find(leader);
    const bool leader_prefilling = l && l->num_computed_tokens() < l->num_prompt_tokens();
    ScheduledStep step;
    ASSERT_TRUE(b.step(&step));
    computed += step.num_tokens();
    for (const ScheduledSequence& s : step.seqs) {
      if ((s.request_id == second || s.request_id == later) && leader_prefilling) follower_admitted_early = true;
    }
  }
  EXPECT_FALSE(follower_admitted_early);
  EXPECT_EQ(b.finished[second]->num_cached_tokens, 28);  // every full block but the one holding the last token
  EXPECT_EQ(computed, (30 + 4) + (2 + 4) + (5 + 2));
  for (RequestId id : {leader, second, later}) EXPECT_TRUE(b.matches_reference(id));
  EXPECT_TRUE(b.pools_free());
  // A follower with another prompt than its leader's is refused.
  const RequestId again = b.sched.add(req(prompt, 50));
  RequestParams wrong = req(tokens(30, 300), 5);
  wrong.prompt_leader = again;
  EXPECT_THROW(b.sched.add(wrong), Error);
}

// ---  preemption

// Runs the same requests on `pools`; returns the outputs by arrival index.
std::vector<Tokens> run_batch(int32_t num_blocks, int64_t* num_preemptions) {
  Bench b(4, {6, 0}, num_blocks, options(48, 8, 16));
  std::vector<RequestId> ids;
  for (int i = 0; i < 12; ++i) ids.push_back(b.sched.add(req(tokens(10 + 7 * (i % 4), 50 * i), 12 + 3 * (i % 5))));
  EXPECT_TRUE(b.run_all());
  std::vector<Tokens> out;
  for (RequestId id : ids) {
    EXPECT_TRUE(b.matches_reference(id));
    const Request& r = *b.finished[id];
    out.emplace_back(r.output_ids().begin(), r.output_ids().end());
  }
  EXPECT_TRUE(b.pools_free());
  *num_preemptions = b.sched.num_preemptions();
  return out;
}

TEST(Scheduler, PreemptionAndRecomputeGiveTheIdsOfABigPool) {
  int64_t big_preemptions = 0, small_preemptions = 0;
  const auto big = run_batch(800, &big_preemptions);
  const auto small = run_batch(30, &small_preemptions);  // the longest request alone takes 14 + 6 blocks
  EXPECT_EQ(big_preemptions, 0);
  EXPECT_GT(small_preemptions, 0);
  EXPECT_EQ(big, small);
}

TEST(Scheduler, APreemptedRequestGoesBackAheadOfLaterArrivals) {
  // Two requests outgrow the pool (8 + 7 blocks of 9); the newer one is preempted when the older needs
  // blocks, and it is admitted again before a third, smaller one that arrived while it was running.
  Bench b(4, {0}, 9, options(64, 2, 16));
  const RequestId a = b.sched.add(req(tokens(12, 1), 20));  // up to 31 positions: 8 blocks
  const RequestId c = b.sched.add(req(tokens(8, 40), 20));
  ASSERT_TRUE(b.step());
  const RequestId d = b.sched.add(req(tokens(4, 80), 2));
  std::map<RequestId, int> last_start;
  for (int s = 0; b.sched.has_unfinished(); ++s) {
    ASSERT_LT(s, 500);
    ScheduledStep step;
    ASSERT_TRUE(b.step(&step));
    for (const ScheduledSequence& q : step.seqs) {
      if (q.start_pos == 0) last_start[q.request_id] = s;
    }
  }
  EXPECT_GT(b.sched.num_preemptions(), 0);
  EXPECT_GT(b.finished[c]->num_preemptions, 0);
  EXPECT_EQ(b.finished[a]->num_preemptions, 0);
  EXPECT_LE(last_start[c], last_start[d]);  // c's recompute started no later than d's admission
  for (RequestId id : {a, c, d}) EXPECT_TRUE(b.matches_reference(id));
  EXPECT_TRUE(b.pools_free());
}

// ---  finishing

TEST(Scheduler, StopIdsEndGenerationAfterMinTokens) {
  Bench b(4, {0}, 64, options(64, 8, 16));
  const Reference free_run = reference_output(req(tokens(9, 7), 12), b.model.windows(), kVocab);
  const int32_t stop = free_run.ids[3];
  const RequestId s0 = b.sched.add(req(tokens(9, 7), 12, 0, {stop}));
  const RequestId s5 = b.sched.add(req(tokens(9, 7), 12, 5, {stop}));
  ASSERT_TRUE(b.run_all());
  EXPECT_EQ(b.finished[s0]->finish_reason, FinishReason::kStop);
  EXPECT_EQ(b.finished[s0]->output_ids().back(), stop);
  EXPECT_LE(b.finished[s0]->num_output_tokens(), 4);
  EXPECT_GT(b.finished[s5]->num_output_tokens(), 5);
  EXPECT_TRUE(b.matches_reference(s0));
  EXPECT_TRUE(b.matches_reference(s5));
}

TEST(Scheduler, AbortWhileWaitingRunningOrInFlight) {
  Bench b(4, {5, 0}, 128, options(64, 1, 16));
  const RequestId running = b.sched.add(req(tokens(20, 1), 30));
  const RequestId waiting = b.sched.add(req(tokens(20, 2), 30));
  const RequestId later = b.sched.add(req(tokens(20, 3), 30));
  ASSERT_TRUE(b.step());  // 16 of 20 prompt tokens
  EXPECT_TRUE(b.sched.abort(waiting));  // waiting: finished at once
  EXPECT_FALSE(b.sched.abort(waiting));
  EXPECT_FALSE(b.sched.abort(12345));
  auto done = b.sched.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->finish_reason, FinishReason::kAbort);
  EXPECT_EQ(done[0]->num_output_tokens(), 0);
  ASSERT_TRUE(b.step());  // the last 4 prompt tokens and the first id
  // In flight: the request stays until update() (its blocks are being read), then goes with its blocks.
  ASSERT_TRUE(run_step(b.sched, b.kv, b.model, b.finished, nullptr, [&](const ScheduledStep&) {
    EXPECT_TRUE(b.sched.abort(running));
    EXPECT_NE(b.sched.find(running), nullptr);
  }));
  ASSERT_TRUE(b.finished.count(running));
  EXPECT_EQ(b.finished[running]->finish_reason, FinishReason::kAbort);
  EXPECT_EQ(b.finished[running]->num_output_tokens(), 1);  // the id sampled in the aborted step is dropped
  ASSERT_TRUE(b.run_all());
  EXPECT_TRUE(b.matches_reference(later));
  EXPECT_TRUE(b.pools_free());
}

TEST(Scheduler, EngineFinishesARequestWithItsOwnReason) {
  Bench b(4, {0}, 64, options(64, 4, 16));
  const RequestId id = b.sched.add(req(tokens(6, 1), 30));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(b.step());
  EXPECT_TRUE(b.sched.finish(id, FinishReason::kStop));  // e.g. a stop string the engine found
  auto done = b.sched.take_finished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]->finish_reason, FinishReason::kStop);
  EXPECT_EQ(done[0]->num_output_tokens(), 3);
  EXPECT_TRUE(b.pools_free());
}

// ---  speculation

// disable_by_batch_size 2: while two requests run, steps carry no drafts (the proposer is not even asked);
// once one remains, its decodes are verify steps. The drafts are the request's own continuation, so every one
// is kept, and the ids are those of the request alone either way.
TEST(Scheduler, SpeculatesOnlyWhileFewerRequestsRunThanDisableByBatchSize) {
  Bench b(4, {0, 8}, 64, options(64, 4, 16));
  int64_t asked = 0;
  b.sched.set_proposer([&](const Request& r, int64_t max_tokens, Tokens& draft) {
    ++asked;
    const Tokens ref = reference_output(r.params, b.model.windows(), kVocab).ids;
    for (auto i = static_cast<size_t>(r.num_output_tokens()); i < ref.size() && static_cast<int64_t>(draft.size()) < max_tokens; ++i) {
      draft.push_back(ref[i]);
    }
  }, 3, /*disable_by_batch_size=*/2);
  EXPECT_TRUE(b.sched.speculates());  // nobody runs yet
  const RequestId longer = b.sched.add(req(tokens(6, 1), 30));
  const RequestId shorter = b.sched.add(req(tokens(5, 20), 4));
  int64_t verify_steps = 0;
  while (b.sched.has_unfinished()) {
    const size_t running = b.sched.num_running();
    EXPECT_EQ(b.sched.speculates(), running < 2);
    const int64_t asked_before = asked;
    ScheduledStep step;
    ASSERT_TRUE(b.step(&step));
    int64_t drafted = 0;
    for (const ScheduledSequence& s : step.seqs) drafted += s.num_draft;
    if (running >= 2) {
      EXPECT_EQ(drafted, 0);
      EXPECT_EQ(asked, asked_before);
    } else if (drafted > 0) {
      ++verify_steps;
    }
  }
  EXPECT_TRUE(b.finished.count(shorter));
  EXPECT_GT(verify_steps, 0);
  // 4 decodes of `longer` beside `shorter` (one token each), then its other 26 tokens at up to 4 a step.
  EXPECT_EQ(b.sched.num_accepted_tokens(), b.sched.num_draft_tokens());
  // Six verify steps of 3 drafts and one of 1 (max_tokens leaves room for one more), all accepted.
  EXPECT_EQ(b.sched.num_verifies(), 7);
  EXPECT_EQ(b.sched.drafted_per_position(), (std::vector<int64_t>{7, 6, 6}));
  EXPECT_EQ(b.sched.accepted_per_position(), (std::vector<int64_t>{7, 6, 6}));
  for (RequestId id : {longer, shorter}) EXPECT_TRUE(b.matches_reference(id));
  EXPECT_TRUE(b.pools_free());
}

// ---  an arena shared with another cache

// The pool's other user (a draft model's cache) holds most blocks; with a reclaimer the scheduler takes them
// back one holder at a time before it preempts anyone or leaves an admission waiting, and without one it
// preempts. Either way the ids are those of each request alone.
TEST(Scheduler, AReclaimerGivesBlocksBackBeforeAnyPreemption) {
  for (const bool with_reclaimer : {true, false}) {
    const auto pool = std::make_shared<BlockPool>(40, 0, std::vector<int64_t>{0, 0});
    KvCacheManager kv(4, {0}, pool, 0, true, 0);
    KvCacheManager other(4, {0}, pool, 1, true, 1);
    std::vector<SequenceKv> held(3);
    for (SequenceKv& h : held) {
      other.admit(h, tokens(1, 7));
      other.append(h, 40);  // 10 blocks each
    }
    FakeModel model(kv, kVocab);
    Scheduler sched(kv, options(64, 4, 16));
    int reclaims = 0;
    if (with_reclaimer) {
      sched.set_reclaimer([&] {
        for (SequenceKv& h : held) {
          if (h.block_tables.empty()) continue;
          other.free(h);
          ++reclaims;
          return true;
        }
        return false;
      });
    }
    std::map<RequestId, std::unique_ptr<Request>> finished;
    std::vector<RequestId> ids;
    for (int i = 0; i < 3; ++i) ids.push_back(sched.add(req(tokens(12, 3 + 20 * i), 20)));
    for (int step = 0; step < 1000 && sched.has_unfinished(); ++step) ASSERT_TRUE(run_step(sched, kv, model, finished, nullptr));
    ASSERT_FALSE(sched.has_unfinished());
    for (RequestId id : ids) {
      const Request& r = *finished.at(id);
      EXPECT_EQ(Tokens(r.output_ids().begin(), r.output_ids().end()), reference_output(r.params, model.windows(), kVocab).ids);
    }
    if (with_reclaimer) {
      EXPECT_EQ(sched.num_preemptions(), 0);
      EXPECT_GT(reclaims, 0);
    } else {
      EXPECT_GT(sched.num_preemptions(), 0);  // 10 blocks for three requests of 8 blocks each
    }
    for (SequenceKv& h : held) {
      if (!h.block_tables.empty()) other.free(h);
    }
    EXPECT_EQ(pool->num_in_use(), 0);
  }
}

}  // namespace
}  // namespace tide
