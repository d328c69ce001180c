// The engine's runtime on the CPU backend, through submit() and its handles: streaming deltas (ids, text,
// logprobs) that add up to the final result, thread-safe submission from many threads, cancellation at any
// moment, stop strings across token boundaries, min_tokens, logit_bias, logprobs against the model's
// log-softmax, n > 1 samples sharing the prompt's blocks, and a stress run of a few hundred random requests
// with random cancellations and pools small enough to preempt.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::fixture;

Engine make_engine(int64_t kv_bytes = int64_t{64} << 20, int64_t block_size = 4, int64_t chunk = 32) {
  EngineOptions options;
  options.block_size = block_size;
  options.kv_cache_memory = kv_bytes;
  options.max_prefill_chunk = chunk;
  options.max_num_batched_tokens = 64;
  return Engine(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), options);
}

void expect_no_blocks_in_use(const Engine& engine) {
  for (const KvGroupReport& r : engine.kv_report().groups) EXPECT_EQ(r.stats.in_use_blocks, 0) << "window " << r.window;
  EXPECT_EQ(engine.kv_report().arena.in_use_blocks, 0);
}

struct GoldenCase {
  std::vector<int32_t> prompt, want;
};

std::vector<GoldenCase> golden_generate() {
  const nlohmann::json g = test::read_json(fixture("cohere2-tiny") / "golden.json");
  std::vector<GoldenCase> out;
  for (const auto& c : g["generate"]) out.push_back({test::ids_of(c["prompt_ids"]), test::ids_of(c["greedy_ids"])});
  return out;
}

GenerateOptions greedy(int64_t max_tokens) {
  GenerateOptions o;
  o.max_tokens = max_tokens;
  o.ignore_eos = true;
  return o;
}

// Every delta of `handle` until it is done, added into one result per sample; checks the delta invariants.
std::vector<SampleResult> drain(RequestHandle& handle) {
  std::vector<SampleResult> out(static_cast<size_t>(handle.num_samples()));
  std::vector<bool> finished(out.size(), false);
  while (std::optional<SampleDelta> d = handle.next()) {
    EXPECT_FALSE(finished.at(static_cast<size_t>(d->index))) << "a delta after the sample's last";
    out[static_cast<size_t>(d->index)].add(*d);
    if (d->finished()) finished[static_cast<size_t>(d->index)] = true;
  }
  EXPECT_TRUE(std::all_of(finished.begin(), finished.end(), [](bool f) { return f; }));
  EXPECT_TRUE(handle.done());
  return out;
}

TEST(EngineRuntime, StreamedDeltasAddUpToTheGoldenIdsAndTheirText) {
  Engine engine = make_engine();
  for (const GoldenCase& g : golden_generate()) {
    const auto handle = engine.submit(g.prompt, greedy(static_cast<int64_t>(g.want.size())));
    int deltas = 0;
    SampleResult r;
    while (std::optional<SampleDelta> d = handle->next()) {
      ++deltas;
      r.add(*d);
    }
    EXPECT_EQ(r.ids, g.want);
    EXPECT_EQ(r.finish_reason, "length");
    EXPECT_EQ(r.text, engine.tokenizer().decode(g.want, /*skip_special_tokens=*/true));
    EXPECT_GE(deltas, 2);  // streamed, not all at the end
  }
  expect_no_blocks_in_use(engine);
}

TEST(EngineRuntime, SubmissionFromManyThreadsGivesEachItsOwnIds) {
  Engine engine = make_engine();
  const std::vector<GoldenCase> golden = golden_generate();
  constexpr int kThreads = 6;
  std::vector<std::vector<SampleResult>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const GoldenCase& g = golden[static_cast<size_t>(t) % golden.size()];
      for (int k = 0; k < 3; ++k) {
        const auto handle = engine.submit(g.prompt, greedy(static_cast<int64_t>(g.want.size())));
        got[static_cast<size_t>(t)].push_back(drain(*handle)[0]);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    for (const SampleResult& r : got[static_cast<size_t>(t)]) {
      EXPECT_EQ(r.ids, golden[static_cast<size_t>(t) % golden.size()].want) << "thread " << t;
    }
  }
  expect_no_blocks_in_use(engine);
}

TEST(EngineRuntime, CancelEndsWithAbortAndReturnsTheBlocks) {
  Engine engine = make_engine();
  const GoldenCase g = golden_generate()[0];
  const auto handle = engine.submit(g.prompt, greedy(400));
  // Cancel after the first tokens arrived: the output so far is a prefix of the uncancelled one.
  SampleResult r;
  std::optional<SampleDelta> d = handle->next();
  ASSERT_TRUE(d);
  r.add(*d);
  handle->cancel();
  handle->cancel();  // twice is harmless
  while ((d = handle->next())) r.add(*d);
  EXPECT_EQ(r.finish_reason, "abort");
  EXPECT_LT(r.ids.size(), 400u);
  const size_t n = std::min(r.ids.size(), g.want.size());
  EXPECT_TRUE(std::equal(r.ids.begin(), r.ids.begin() + static_cast<std::ptrdiff_t>(n), g.want.begin()));
  expect_no_blocks_in_use(engine);

  // Cancelled while still waiting (submitted and cancelled at once), and after finishing (nothing happens).
  const auto early = engine.submit(g.prompt, greedy(400));
  early->cancel();
  EXPECT_EQ(drain(*early)[0].finish_reason, "abort");
  const auto finished = engine.submit(g.prompt, greedy(2));
  EXPECT_EQ(drain(*finished)[0].finish_reason, "length");
  finished->cancel();
  expect_no_blocks_in_use(engine);
}

TEST(EngineRuntime, DestroyingTheEngineAbortsLiveRequests) {
  std::shared_ptr<RequestHandle> handle;
  {
    Engine engine = make_engine();
    handle = engine.submit(golden_generate()[0].prompt, greedy(1000));
    ASSERT_TRUE(handle->next());
  }
  const std::vector<SampleResult> r = drain(*handle);
  EXPECT_EQ(r[0].finish_reason, "abort");
  handle->cancel();  // the engine is gone: nothing to do, no crash
}

TEST(EngineRuntime, StopStringsAcrossTokenBoundariesAreLeftOutOfTheText) {
  Engine engine = make_engine();
  const GoldenCase g = golden_generate()[0];
  const std::string full = engine.tokenizer().decode(g.want, true);
  // Where each token's text ends in `full` (npos where a prefix's text is not a prefix of it, e.g. inside a
  // UTF-8 character): pick a stop string that starts inside one token and ends inside the token after next.
  std::vector<size_t> ends;
  for (size_t i = 1; i <= g.want.size(); ++i) {
    const std::string prefix = engine.tokenizer().decode(std::span(g.want).first(i), true);
    ends.push_back(full.compare(0, prefix.size(), prefix) == 0 ? prefix.size() : std::string::npos);
  }
  auto fits = [&](size_t t) {
    return ends[t] != std::string::npos && ends[t + 1] != std::string::npos && ends[t + 2] != std::string::npos &&
           ends[t] >= 1 && ends[t + 1] > ends[t] && ends[t + 2] > ends[t + 1];
  };
  size_t token = 0;
  while (token + 2 < ends.size() && !fits(token)) ++token;
  ASSERT_LT(token + 2, ends.size()) << "no three tokens with text in a row";
  const size_t begin = ends[token] - 1, end = ends[token + 1] + 1;  // spans three tokens
  const std::string stop = full.substr(begin, end - begin);
  const size_t first = full.find(stop);  // the earliest occurrence ends generation

  GenerateOptions o = greedy(static_cast<int64_t>(g.want.size()));
  o.stop = {"never appears in this text \x01", stop};
  const auto handle = engine.submit(g.prompt, o);
  const SampleResult r = drain(*handle)[0];
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.text, full.substr(0, first));
  // The ids end with the token that completed the match.
  size_t last = 0;
  while (ends[last] == std::string::npos || ends[last] < first + stop.size()) ++last;
  EXPECT_EQ(r.ids, std::vector<int32_t>(g.want.begin(), g.want.begin() + static_cast<std::ptrdiff_t>(last + 1)));

  o.include_stop_str_in_output = true;
  EXPECT_EQ(engine.generate(g.prompt, o).text, full.substr(0, first + stop.size()));
  // min_tokens past the match: the stop string is not looked for before them.
  o.include_stop_str_in_output = false;
  o.min_tokens = static_cast<int64_t>(g.want.size());
  const GenerateResult late = engine.generate(g.prompt, o);
  EXPECT_EQ(late.ids, g.want);
  EXPECT_EQ(late.finish_reason, "length");
  expect_no_blocks_in_use(engine);
}

TEST(EngineRuntime, LogitBiasAndMinTokens) {
  Engine engine = make_engine();
  const GoldenCase g = golden_generate()[0];
  const int32_t eos = engine.stop_token_ids().front();
  // +100 on EOS makes it the argmax at once; with min_tokens 5 it is banned for the first 5 tokens.
  GenerateOptions o;
  o.max_tokens = 20;
  o.sampling.logit_bias = {{eos, 100.0f}};
  GenerateResult r = engine.generate(g.prompt, o);
  EXPECT_EQ(r.ids, std::vector<int32_t>{eos});
  EXPECT_EQ(r.finish_reason, "stop");
  o.min_tokens = 5;
  r = engine.generate(g.prompt, o);
  ASSERT_EQ(r.ids.size(), 6u);
  EXPECT_EQ(r.ids.back(), eos);
  EXPECT_EQ(std::count(r.ids.begin(), r.ids.end(), eos), 1);
  EXPECT_EQ(r.finish_reason, "stop");
  // A stop token id is banned the same way; a bias can also forbid the greedy choice.
  GenerateOptions ban = greedy(4);
  ban.sampling.logit_bias = {{g.want[0], -100.0f}};
  EXPECT_NE(engine.generate(g.prompt, ban).ids[0], g.want[0]);
  // Out-of-range values are refused at submit.
  ban.sampling.logit_bias = {{g.want[0], 101.0f}};
  EXPECT_THROW(engine.submit(g.prompt, ban), Error);
  ban.sampling.logit_bias = {{engine.config().vocab_size, 1.0f}};
  EXPECT_THROW(engine.submit(g.prompt, ban), Error);
  expect_no_blocks_in_use(engine);
}

TEST(EngineRuntime, LogprobsAreTheModelsLogSoftmax) {
  Engine engine = make_engine();
  const GoldenCase g = golden_generate()[0];
  GenerateOptions o = greedy(6);
  o.logprobs = 5;
  o.sampling.repetition_penalty = 1.3;  // logprobs are of the model's logits, before the penalty
  const GenerateResult r = engine.generate(g.prompt, o);
  ASSERT_EQ(r.logprobs.size(), r.ids.size());
  std::vector<int32_t> context = g.prompt;
  for (size_t i = 0; i < r.ids.size(); ++i) {
    const std::vector<float> logits = engine.prompt_logits(context, false)[0];
    double max = -INFINITY, sum = 0;
    for (float v : logits) max = std::max(max, double{v});
    for (float v : logits) sum += std::exp(double{v} - max);
    auto logprob = [&](int32_t id) { return double{logits[static_cast<size_t>(id)]} - max - std::log(sum); };
    const TokenLogprobs& lp = r.logprobs[i];
    EXPECT_EQ(lp.id, r.ids[i]);
    EXPECT_NEAR(lp.logprob, logprob(r.ids[i]), 1e-4);
    ASSERT_EQ(lp.top.size(), 5u);
    std::vector<int32_t> order(logits.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int32_t>(k);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(lp.top[k].first, order[k]) << "step " << i << " rank " << k;
      EXPECT_NEAR(lp.top[k].second, logprob(order[k]), 1e-4);
    }
    context.push_back(r.ids[i]);
  }
  o.logprobs = 0;
  const GenerateResult chosen_only = engine.generate(g.prompt, o);
  ASSERT_EQ(chosen_only.logprobs.size(), 6u);
  EXPECT_TRUE(chosen_only.logprobs[0].top.empty());
  EXPECT_EQ(chosen_only.logprobs[0].logprob, r.logprobs[0].logprob);
  o.logprobs = kMaxLogprobs + 1;
  EXPECT_THROW(engine.submit(g.prompt, o), Error);
}

TEST(EngineRuntime, SamplesOfOneRequestShareThePromptAndAreReproducible) {
  Engine engine = make_engine();
  const GoldenCase g = golden_generate()[0];
  GenerateOptions o;
  o.max_tokens = 12;
  o.ignore_eos = true;
  o.n = 4;
  o.sampling.temperature = 1.0;
  o.sampling.seed = 77;
  const GenerateResult a = engine.generate(g.prompt, o);
  ASSERT_EQ(a.samples.size(), 4u);
  EXPECT_EQ(a.ids, a.samples[0].ids);
  int distinct = 0;
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a.samples[i].ids.size(), 12u);
    EXPECT_EQ(a.samples[i].finish_reason, "length");
    for (size_t j = 0; j < i; ++j) distinct += a.samples[i].ids != a.samples[j].ids;
  }
  EXPECT_GT(distinct, 0);
  // Samples after the first reuse the prompt's full blocks (computed once by the first).
  const int64_t block = engine.kv_cache().block_size();
  const int64_t shared = (static_cast<int64_t>(g.prompt.size()) - 1) / block * block;
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(a.samples[i].cached_tokens, shared) << "sample " << i;

  // The same seed gives the same samples in a fresh engine; sample 0 is the n = 1 request's.
  Engine other = make_engine();
  const GenerateResult b = other.generate(g.prompt, o);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(b.samples[i].ids, a.samples[i].ids);
  o.n = 1;
  EXPECT_EQ(other.generate(g.prompt, o).ids, a.samples[0].ids);
  o.n = 0;
  EXPECT_THROW(engine.submit(g.prompt, o), Error);
  expect_no_blocks_in_use(engine);
}

TEST(EngineRuntime, RequestsThatCanNeverFitAreRefusedAtSubmit) {
  Engine engine = make_engine(int64_t{1} << 20);
  const int64_t max_len = engine.config().max_position_embeddings;
  EXPECT_THROW(engine.submit({5, 6}, greedy(max_len)), Error);  // beyond the model's length
  try {
    engine.submit({5, 6}, greedy(max_len - 2));  // within it, beyond the (small) pools
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache"), std::string::npos) << e.what();
  }
  EXPECT_THROW(engine.submit({}, greedy(2)), Error);
  GenerateOptions o = greedy(2);
  o.stop = {""};
  EXPECT_THROW(engine.submit({5, 6}, o), Error);
  // max_tokens 0 finishes at once.
  const std::vector<SampleResult> r = drain(*engine.submit({5, 6}, greedy(0)));
  EXPECT_EQ(r[0].finish_reason, "length");
  EXPECT_TRUE(r[0].ids.empty());
}

TEST(EngineRuntime, StatsCountTokensAndMaxModelLenCapsRequests) {
  EngineOptions options;
  options.kv_cache_memory = int64_t{16} << 20;
  options.max_model_len = 100;
  Engine engine(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), options);
  EXPECT_EQ(engine.max_model_len(), 100);
  EXPECT_THROW(engine.submit(std::vector<int32_t>(90, 7), greedy(11)), Error);
  const GoldenCase g = golden_generate()[0];
  const GenerateResult r = engine.generate(g.prompt, greedy(5));
  GenerateOptions two = greedy(3);
  two.n = 2;
  engine.generate(g.prompt, two);  // the prompt again: cached blocks, then the second sample's tail
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.generation_tokens, 5 + 3 + 3);
  EXPECT_EQ(s.num_requests_finished, 3);
  EXPECT_EQ(s.num_running, 0);
  EXPECT_EQ(s.num_waiting, 0);
  EXPECT_GE(s.prompt_tokens, static_cast<int64_t>(g.prompt.size()) + 1);
  EXPECT_LT(s.prompt_tokens, 2 * static_cast<int64_t>(g.prompt.size()));  // reused blocks are not computed
  EXPECT_GT(s.num_steps, 5);
  options.max_model_len = engine.config().max_position_embeddings + 1;
  EXPECT_THROW(Engine(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), options), Error);
}

TEST(EngineRuntime, LoadProgressCountsUpToTheCheckpointsBytes) {
  EngineOptions options;
  options.kv_cache_memory = int64_t{16} << 20;
  std::vector<std::pair<int64_t, int64_t>> calls;
  options.load_progress = [&](int64_t done, int64_t total) { calls.emplace_back(done, total); };
  Engine engine(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), options);
  ASSERT_EQ(calls.size(), static_cast<size_t>(engine.config().num_layers) + 1);  // embedding, then each layer
  const int64_t total = calls.back().second;
  EXPECT_EQ(calls.back().first, total);
  const auto file = static_cast<int64_t>(std::filesystem::file_size(fixture("cohere2-tiny") / "model.safetensors"));
  EXPECT_LE(total, file);
  EXPECT_GT(total, file * 9 / 10);  // every tensor but the header
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GT(calls[i].first, calls[i - 1].first);
}

// A few hundred random requests (lengths, sampling parameters, stop strings, n, logprobs) submitted from two
// threads, a third cancelling random ones at random moments, pools small enough to preempt: every request ends
// with a valid finish reason, greedy ones that were not cancelled have their solo ids, no block leaks, and the
// whole run is bounded in time.
TEST(EngineRuntime, StressWithCancellationsAndPreemption) {
  Engine engine = make_engine(int64_t{1} << 20, 4, 16);
  const std::vector<GoldenCase> golden = golden_generate();
  const int32_t vocab = engine.config().vocab_size;
  constexpr int kRequests = 240;
  struct Item {
    std::vector<int32_t> prompt;
    GenerateOptions options;
    std::shared_ptr<RequestHandle> handle;
    std::vector<SampleResult> result;
    bool greedy_reference = false;  // a golden prompt, greedy, ignore_eos: must equal the golden prefix
    size_t golden = 0;
  };
  std::vector<Item> items(kRequests);
  std::mt19937 rng(11);
  for (int i = 0; i < kRequests; ++i) {
    Item& it = items[static_cast<size_t>(i)];
    it.options.max_tokens = 1 + static_cast<int64_t>(rng() % 24);
    if (i % 4 == 0) {
      it.golden = rng() % golden.size();
      it.prompt = golden[it.golden].prompt;
      it.options.max_tokens = std::min<int64_t>(it.options.max_tokens, static_cast<int64_t>(golden[it.golden].want.size()));
      it.options.ignore_eos = true;
      it.greedy_reference = true;
    } else {
      const size_t len = 1 + rng() % 60;
      for (size_t t = 0; t < len; ++t) it.prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab)));
      it.options.ignore_eos = rng() % 2 == 0;
      if (rng() % 2) {
        it.options.sampling.temperature = 0.9;
        it.options.sampling.top_k = 40;
        it.options.sampling.seed = rng();
      }
      if (rng() % 4 == 0) it.options.stop = {"e", "th"};
      if (rng() % 5 == 0) it.options.n = 2 + static_cast<int>(rng() % 2);
      if (rng() % 5 == 0) it.options.logprobs = static_cast<int>(rng() % 4);
      if (rng() % 6 == 0) it.options.min_tokens = static_cast<int64_t>(rng() % 4);
      if (rng() % 6 == 0) it.options.sampling.logit_bias = {{static_cast<int32_t>(rng() % 1024), 5.0f}};
    }
  }
  const auto started = std::chrono::steady_clock::now();
  std::atomic<int> submitted{0};
  auto submitter = [&](int parity) {
    for (int i = parity; i < kRequests; i += 2) {
      Item& it = items[static_cast<size_t>(i)];
      it.handle = engine.submit(it.prompt, it.options);
      submitted.fetch_add(1);
    }
  };
  std::thread a(submitter, 0), b(submitter, 1);
  std::thread canceller([&] {
    std::mt19937 r(5);
    while (submitted.load() < kRequests) std::this_thread::yield();
    for (int k = 0; k < 60; ++k) {
      items[r() % kRequests].handle->cancel();
      std::this_thread::sleep_for(std::chrono::microseconds(r() % 3000));
    }
  });
  a.join();
  b.join();
  canceller.join();
  int aborted = 0, stopped = 0;
  for (Item& it : items) {
    it.result = drain(*it.handle);
    ASSERT_EQ(it.result.size(), static_cast<size_t>(it.options.n));
    for (const SampleResult& s : it.result) {
      const std::string& why = s.finish_reason;
      ASSERT_TRUE(why == "stop" || why == "length" || why == "abort") << why << ": " << s.error;
      aborted += why == "abort";
      stopped += why == "stop";
      if (why == "length") {
        EXPECT_EQ(static_cast<int64_t>(s.ids.size()), it.options.max_tokens);
      }
      EXPECT_LE(static_cast<int64_t>(s.ids.size()), it.options.max_tokens);
      if (it.options.logprobs >= 0) {
        EXPECT_EQ(s.logprobs.size(), s.ids.size());
      }
      if (it.greedy_reference) {
        const std::vector<int32_t>& want = golden[it.golden].want;
        EXPECT_TRUE(std::equal(s.ids.begin(), s.ids.end(), want.begin())) << "greedy ids changed in the batch";
      }
    }
  }
  EXPECT_GT(aborted, 0);
  EXPECT_GT(stopped, 0);
  expect_no_blocks_in_use(engine);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::minutes(5));
}

}  // namespace
}  // namespace tide
