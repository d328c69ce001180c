// Engine::generate_batch on the CPU backend: continuous batching must not change anyone's output. Every golden
// greedy case, submitted together with random other requests (random prompts and lengths, some sharing
// prefixes, some sampled, some stopping at EOS), gives the golden ids, also with chunks and budgets small enough
// to mix prefill chunks and decodes in every step and with a KV budget that forces preemption; a seeded
// request samples the same ids alone and in a batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::fixture;

struct Config {
  int64_t block_size = 16;
  int64_t kv_cache_memory = int64_t{64} << 20;
  int64_t max_prefill_chunk = 512;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_num_seqs = 256;
};

Engine make_engine(const std::string& name, const Config& c) {
  EngineOptions options;
  options.block_size = c.block_size;
  options.kv_cache_memory = c.kv_cache_memory;
  options.max_prefill_chunk = c.max_prefill_chunk;
  options.max_num_batched_tokens = c.max_num_batched_tokens;
  options.max_num_seqs = c.max_num_seqs;
  return Engine(fixture(name), std::make_unique<CpuBackend>(), options);
}

void expect_no_blocks_in_use(const Engine& engine) {
  EXPECT_EQ(engine.kv_cache().pool().num_in_use(), 0);
}

struct Golden {
  std::vector<int32_t> prompt, want;
};

// The golden greedy continuations: the "generate" cases and the prefix-sharing "b" prompts.
std::vector<Golden> golden_cases(const std::string& name) {
  const nlohmann::json g = test::read_json(fixture(name) / "golden.json");
  std::vector<Golden> out;
  for (const auto& c : g["generate"]) out.push_back({test::ids_of(c["prompt_ids"]), test::ids_of(c["greedy_ids"])});
  for (const auto& c : g["prefix_sharing"]) out.push_back({test::ids_of(c["b_ids"]), test::ids_of(c["b_greedy_ids"])});
  return out;
}

// `count` random requests: prompts of 1 .. 120 ids (half of them a golden prompt's prefix plus a random tail),
// 1 .. 40 new tokens; some greedy, some sampled with penalties, some stopping at EOS.
std::vector<BatchRequest> random_requests(std::mt19937& rng, size_t count, const std::vector<Golden>& golden,
                                          int32_t vocab) {
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<BatchRequest> out;
  for (size_t i = 0; i < count; ++i) {
    BatchRequest r;
    if (i % 2 == 0) {
      const std::vector<int32_t>& base = golden[rng() % golden.size()].prompt;
      r.prompt.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(1 + rng() % base.size()));
    }
    const size_t tail = (r.prompt.empty() ? 1 : 0) + rng() % 60;
    for (size_t t = 0; t < tail; ++t) r.prompt.push_back(token(rng));
    r.options.max_tokens = 1 + static_cast<int64_t>(rng() % 40);
    r.options.ignore_eos = rng() % 2 == 0;
    if (i % 3 == 1) {
      r.options.sampling.temperature = 0.8;
      r.options.sampling.top_p = 0.9;
      r.options.sampling.frequency_penalty = 0.3;
      r.options.sampling.seed = rng();
    }
    // The rest of the request parameters, so that the golden requests share steps with all of them.
    if (i % 4 == 2) r.options.stop = {"e", "ab"};
    if (i % 5 == 3) r.options.n = 2;
    if (i % 3 == 2) r.options.logprobs = static_cast<int>(rng() % 3);
    if (i % 4 == 1) r.options.min_tokens = static_cast<int64_t>(rng() % 3);
    if (i % 5 == 4) r.options.sampling.logit_bias = {{token(rng), 3.0f}, {token(rng) / 2 * 2 + 1, -2.0f}};
    if (r.options.sampling.logit_bias.size() == 2 &&
        r.options.sampling.logit_bias[0].first == r.options.sampling.logit_bias[1].first) {
      r.options.sampling.logit_bias.pop_back();
    }
    out.push_back(std::move(r));
  }
  return out;
}

// The golden cases and `num_random` others in a random order; returns the batch and where each golden is.
std::vector<BatchRequest> mixed_batch(const std::vector<Golden>& golden, size_t num_random, int32_t vocab,
                                      uint32_t seed, std::vector<size_t>& golden_index) {
  std::mt19937 rng(seed);
  std::vector<BatchRequest> batch = random_requests(rng, num_random, golden, vocab);
  golden_index.clear();
  for (const Golden& g : golden) {
    BatchRequest r;
    r.prompt = g.prompt;
    r.options.max_tokens = static_cast<int64_t>(g.want.size());
    r.options.ignore_eos = true;
    const size_t at = rng() % (batch.size() + 1);
    batch.insert(batch.begin() + static_cast<std::ptrdiff_t>(at), std::move(r));
    for (size_t& i : golden_index) i += i >= at ? 1 : 0;
    golden_index.push_back(at);
  }
  return batch;
}

class BatchTest : public ::testing::TestWithParam<std::string> {};

void check_batch(const std::string& name, const Config& config, size_t num_random, uint32_t seed,
                 int64_t* preemptions = nullptr) {
  Engine engine = make_engine(name, config);
  const std::vector<Golden> golden = golden_cases(name);
  std::vector<size_t> at;
  const std::vector<BatchRequest> batch = mixed_batch(golden, num_random, engine.config().vocab_size, seed, at);
  std::vector<std::vector<int32_t>> streamed(batch.size());
  const std::vector<GenerateResult> results =
      engine.generate_batch(batch, [&](size_t i, int32_t id) { streamed.at(i).push_back(id); });
  ASSERT_EQ(results.size(), batch.size());
  for (size_t g = 0; g < golden.size(); ++g) {
    EXPECT_EQ(results[at[g]].ids, golden[g].want) << "golden case " << g;
    EXPECT_EQ(results[at[g]].finish_reason, "length");
  }
  int64_t total_preemptions = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const GenerateResult& r = results[i];
    EXPECT_EQ(streamed[i], r.ids) << "request " << i;
    total_preemptions += r.num_preemptions;
    if (r.finish_reason == "length") {
      EXPECT_EQ(static_cast<int64_t>(r.ids.size()), batch[i].options.max_tokens) << "request " << i;
    } else {
      ASSERT_EQ(r.finish_reason, "stop") << "request " << i << ": " << r.error;
      const auto& stops = engine.stop_token_ids();
      const bool stop_id = std::find(stops.begin(), stops.end(), r.ids.back()) != stops.end();
      EXPECT_TRUE((stop_id && !batch[i].options.ignore_eos) || !batch[i].options.stop.empty()) << "request " << i;
      EXPECT_GE(static_cast<int64_t>(r.ids.size()), batch[i].options.min_tokens);
    }
    EXPECT_EQ(r.samples.size(), static_cast<size_t>(batch[i].options.n));
    if (batch[i].options.logprobs >= 0) {
      EXPECT_EQ(r.logprobs.size(), r.ids.size());
    }
  }
  expect_no_blocks_in_use(engine);
  if (preemptions) *preemptions = total_preemptions;
}

TEST_P(BatchTest, GoldenGreedyIdsWithRandomOtherRequests) {
  check_batch(GetParam(), Config{}, 8, 1);
  // Small chunks and step budgets: every step mixes prefill chunks and decodes; few sequences at once.
  check_batch(GetParam(), Config{4, int64_t{64} << 20, 24, 40, 5}, 10, 2);
}

TEST_P(BatchTest, GoldenGreedyIdsWhenPreempted) {
  // A KV budget that holds only a few of the requests at once: the newest are preempted and recomputed.
  int64_t preemptions = 0;
  check_batch(GetParam(), Config{4, int64_t{1} << 20, 32, 256, 256}, 10, 3, &preemptions);
  EXPECT_GT(preemptions, 0);
}

TEST_P(BatchTest, SeededSamplingDoesNotDependOnTheBatch) {
  Engine engine = make_engine(GetParam(), Config{8, int64_t{64} << 20, 32, 64, 256});
  const std::vector<Golden> golden = golden_cases(GetParam());
  BatchRequest sampled;
  sampled.prompt = golden[0].prompt;
  sampled.options.max_tokens = 24;
  sampled.options.ignore_eos = true;
  sampled.options.sampling.temperature = 1.0;
  sampled.options.sampling.top_k = 50;
  sampled.options.sampling.top_p = 0.95;
  sampled.options.sampling.presence_penalty = 0.5;
  sampled.options.sampling.repetition_penalty = 1.1;
  sampled.options.sampling.seed = 1234;
  const GenerateResult alone = engine.generate(sampled.prompt, sampled.options);
  ASSERT_EQ(alone.ids.size(), 24u);

  std::mt19937 rng(4);
  std::vector<BatchRequest> batch = random_requests(rng, 7, golden, engine.config().vocab_size);
  batch.insert(batch.begin() + 3, sampled);
  BatchRequest other_seed = sampled;
  other_seed.options.sampling.seed = 99;
  batch.push_back(other_seed);
  const std::vector<GenerateResult> results = engine.generate_batch(batch);
  EXPECT_EQ(results[3].ids, alone.ids);
  EXPECT_NE(results.back().ids, alone.ids);
  expect_no_blocks_in_use(engine);
}

TEST_P(BatchTest, StopIdsEndTheirRequestOnly) {
  Engine engine = make_engine(GetParam(), Config{4, int64_t{64} << 20, 16, 32, 256});
  const std::vector<Golden> golden = golden_cases(GetParam());
  std::vector<BatchRequest> batch;
  for (const Golden& g : golden) {
    BatchRequest r;
    r.prompt = g.prompt;
    r.options.max_tokens = static_cast<int64_t>(g.want.size());
    r.options.ignore_eos = true;
    batch.push_back(r);
    r.options.stop_token_ids = {g.want[g.want.size() / 2]};  // ends at its first occurrence, kept in the ids
    batch.push_back(r);
  }
  const std::vector<GenerateResult> results = engine.generate_batch(batch);
  for (size_t g = 0; g < golden.size(); ++g) {
    const std::vector<int32_t>& want = golden[g].want;
    EXPECT_EQ(results[2 * g].ids, want) << g;
    EXPECT_EQ(results[2 * g].finish_reason, "length");
    const auto stop = std::find(want.begin(), want.end(), want[want.size() / 2]);
    EXPECT_EQ(results[2 * g + 1].ids, std::vector<int32_t>(want.begin(), stop + 1)) << g;
    EXPECT_EQ(results[2 * g + 1].finish_reason, "stop");
  }
  expect_no_blocks_in_use(engine);
}

TEST_P(BatchTest, InvalidRequestsAreRefusedBeforeAnyRuns) {
  Engine engine = make_engine(GetParam(), Config{});
  std::vector<BatchRequest> batch(3);
  for (BatchRequest& r : batch) {
    r.prompt = {5, 6, 7};
    r.options.ignore_eos = true;
  }
  batch[1].prompt.push_back(engine.config().vocab_size);
  try {
    engine.generate_batch(batch);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("request 1"), std::string::npos) << e.what();
  }
  batch[1].prompt.pop_back();
  batch[2].options.stop_token_ids = {-1};
  EXPECT_THROW(engine.generate_batch(batch), Error);
  batch[2].options.stop_token_ids.clear();
  batch[2].options.max_tokens = 0;
  const std::vector<GenerateResult> results = engine.generate_batch(batch);
  EXPECT_EQ(results[0].ids.size(), 16u);
  EXPECT_EQ(results[0].ids, results[1].ids);
  EXPECT_TRUE(results[2].ids.empty());
  EXPECT_EQ(results[2].finish_reason, "length");
  EXPECT_TRUE(engine.generate_batch(std::vector<BatchRequest>{}).empty());
  expect_no_blocks_in_use(engine);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchTest, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"));

}  // namespace
}  // namespace tide
