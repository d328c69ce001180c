// Continuous batching and chunked prefill on the CUDA backend, in bf16, on the golden fixtures. Every golden
// greedy case (the "generate" cases and the prefix-sharing B prompts), submitted with random other requests in
// a random order, with small chunks and step budgets, or with a KV budget that forces preemption, passes the
// bf16 greedy criterion (bf16_greedy.h); the prefix-sharing B, run after A with reuse in a batch, gives exactly
// the ids of B alone without reuse; prompt logits do not depend on the prefill chunk or the block size beyond
// bf16 noise; a long prompt prefilled in chunks between other requests' decodes keeps everyone's greedy ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>
#include <utility>

#include "../test_util.h"
#include "bf16_greedy.h"
#include "gpu_test_util.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::fixture;

struct EngineSetup {
  int64_t block_size = 16;
  int64_t kv_cache_memory = int64_t{256} << 20;
  int64_t max_prefill_chunk = 512;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_num_seqs = 256;
  bool enable_prefix_caching = true;
};

// bf16 K/V take half the bytes of the CPU's f32, so this buys the same blocks as the 1 MiB of the CPU batch
// test: room for a few of the requests at once, the rest are preempted and recomputed.
constexpr int64_t kSmallKvBudget = int64_t{512} << 10;

Engine cuda_engine(const std::string& name, const EngineSetup& s) {
  EngineOptions o;
  o.block_size = s.block_size;
  o.kv_cache_memory = s.kv_cache_memory;
  o.max_prefill_chunk = s.max_prefill_chunk;
  o.max_num_batched_tokens = s.max_num_batched_tokens;
  o.max_num_seqs = s.max_num_seqs;
  o.enable_prefix_caching = s.enable_prefix_caching;
  return Engine(fixture(name), std::make_unique<CudaBackend>(), o);
}

// The f32 CPU engine: the reference whose margins judge a bf16 divergence.
Engine cpu_reference(const std::string& name) {
  EngineOptions o;
  o.kv_cache_memory = int64_t{64} << 20;
  return Engine(fixture(name), std::make_unique<CpuBackend>(), o);
}

void expect_pools_empty(const Engine& engine) { EXPECT_EQ(engine.kv_cache().pool().num_in_use(), 0); }

GenerateOptions greedy(size_t max_tokens) {
  GenerateOptions o;
  o.max_tokens = static_cast<int64_t>(max_tokens);
  o.ignore_eos = true;
  return o;
}

// " agree/total", built in steps (GCC 12 warns falsely on `" " + std::to_string(...)`).
void append_agreement(std::string& out, const test::GreedyAgreement& a) {
  out += ' ';
  out += std::to_string(a.agree);
  out += '/';
  out += std::to_string(a.total);
}

// --- batches with random other requests

// A greedy continuation golden.json gives.
struct GoldenCase {
  std::string name;
  std::vector<int32_t> prompt, want;
  int64_t shared_prefix = -1;  // a prefix-sharing B: the tokens it shares with A; -1 for a "generate" case
};

std::vector<GoldenCase> golden_cases(const nlohmann::json& g) {
  std::vector<GoldenCase> out;
  for (size_t i = 0; i < g["generate"].size(); ++i) {
    const auto& c = g["generate"][i];
    out.push_back({"generate " + std::to_string(i), test::ids_of(c["prompt_ids"]), test::ids_of(c["greedy_ids"])});
  }
  for (size_t i = 0; i < g["prefix_sharing"].size(); ++i) {
    const auto& c = g["prefix_sharing"][i];
    out.push_back({"prefix_sharing " + std::to_string(i) + " B", test::ids_of(c["b_ids"]),
                   test::ids_of(c["b_greedy_ids"]), c["shared_prefix"].get<int64_t>()});
  }
  return out;
}

// `count` random requests: prompts of 1 .. 100 ids (every third starts with a prefix of a golden prompt),
// 1 .. 32 new tokens, every other one ignoring EOS, every third sampled (temperature 0.9, top-p, a penalty,
// its own seed).
std::vector<BatchRequest> random_requests(std::mt19937& rng, size_t count, const std::vector<GoldenCase>& golden,
                                          int32_t vocab) {
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  std::vector<BatchRequest> out(count);
  for (size_t i = 0; i < count; ++i) {
    BatchRequest& r = out[i];
    if (i % 3 == 0) {
      const std::vector<int32_t>& base = golden[rng() % golden.size()].prompt;
      const size_t prefix = 1 + rng() % std::min<size_t>(base.size(), 60);
      r.prompt.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(prefix));
    }
    const size_t length = std::max<size_t>(1, r.prompt.size() + rng() % (101 - r.prompt.size()));
    while (r.prompt.size() < length) r.prompt.push_back(token(rng));
    r.options.max_tokens = 1 + static_cast<int64_t>(rng() % 32);
    r.options.ignore_eos = i % 2 == 0;
    if (i % 3 == 1) {
      r.options.sampling.temperature = 0.9;
      r.options.sampling.top_p = 0.95;
      r.options.sampling.presence_penalty = 0.2;
      r.options.sampling.seed = rng();
    }
  }
  return out;
}

// A prefix-sharing fixture's A prompts, run first so that the prefix cache holds them when B arrives
// (fixtures/README.md: "Run A, then B in the same engine with prefix reuse on").
void run_prefix_sharing_a(Engine& engine, const nlohmann::json& g) {
  std::set<std::vector<int32_t>> prompts;
  for (const auto& c : g["prefix_sharing"]) prompts.insert(test::ids_of(c["a_ids"]));
  std::vector<BatchRequest> batch;
  for (const auto& a : prompts) batch.push_back(BatchRequest{a, greedy(1)});
  for (const GenerateResult& r : engine.generate_batch(batch)) EXPECT_EQ(r.finish_reason, "length");
}

// The golden cases and `num_random` random requests, in an order drawn from `seed`, through one
// generate_batch after the prefix-sharing A prompts; `num_preemptions` gets the batch's preemptions.
void check_batch(const std::string& name, const EngineSetup& setup, size_t num_random, uint32_t seed,
                 int64_t* num_preemptions = nullptr) {
  SCOPED_TRACE(name + " block " + std::to_string(setup.block_size) + " chunk " +
               std::to_string(setup.max_prefill_chunk) + " seed " + std::to_string(seed));
  const nlohmann::json g = test::read_json(fixture(name) / "golden.json");
  const std::vector<GoldenCase> golden = golden_cases(g);
  Engine engine = cuda_engine(name, setup);
  run_prefix_sharing_a(engine, g);

  std::mt19937 rng(seed);
  std::vector<BatchRequest> batch = random_requests(rng, num_random, golden, engine.config().vocab_size);
  std::vector<size_t> at;  // where each golden case is in the batch
  for (const GoldenCase& c : golden) {
    const size_t i = rng() % (batch.size() + 1);
    batch.insert(batch.begin() + static_cast<std::ptrdiff_t>(i), BatchRequest{c.prompt, greedy(c.want.size())});
    for (size_t& j : at) j += j >= i ? 1 : 0;
    at.push_back(i);
  }
  std::vector<std::vector<int32_t>> streamed(batch.size());
  const std::vector<GenerateResult> results =
      engine.generate_batch(batch, [&](size_t i, int32_t id) { streamed.at(i).push_back(id); });
  ASSERT_EQ(results.size(), batch.size());

  int64_t preemptions = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const GenerateResult& r = results[i];
    EXPECT_EQ(streamed[i], r.ids) << "request " << i;
    preemptions += r.num_preemptions;
    if (r.finish_reason == "length") {
      EXPECT_EQ(static_cast<int64_t>(r.ids.size()), batch[i].options.max_tokens) << "request " << i;
    } else {
      ASSERT_EQ(r.finish_reason, "stop") << "request " << i << ": " << r.error;
      EXPECT_FALSE(batch[i].options.ignore_eos) << "request " << i;
      const std::vector<int32_t>& stops = engine.stop_token_ids();
      EXPECT_TRUE(!r.ids.empty() && std::find(stops.begin(), stops.end(), r.ids.back()) != stops.end());
    }
  }
  expect_pools_empty(engine);

  // Each golden case against the f32 reference, and against the same case alone in a fresh engine of the same
  // setup without prefix reuse. For B the latter must hold exactly: the batch's other rows, its chunking and
  // the reused prefix A computed must not change B's ids (it holds on an H200 in every setup here). The
  // "generate" cases are only counted: a bf16 step whose top-2 margin is tiny may go either way in a batch.
  Engine reference = cpu_reference(name);
  EngineSetup alone_setup = setup;
  alone_setup.enable_prefix_caching = false;
  Engine alone = cuda_engine(name, alone_setup);
  const double noise = test::bf16_logit_noise(g);
  std::string agreement;
  size_t same_as_alone = 0;
  for (size_t k = 0; k < golden.size(); ++k) {
    const GoldenCase& c = golden[k];
    const GenerateResult& r = results[at[k]];
    EXPECT_EQ(r.finish_reason, "length") << c.name;
    const test::GreedyAgreement a =
        test::expect_greedy_within_bf16_noise(reference, c.prompt, c.want, r.ids, noise, name + " " + c.name);
    append_agreement(agreement, a);
    const std::vector<int32_t> alone_ids = alone.generate(c.prompt, greedy(c.want.size())).ids;
    same_as_alone += alone_ids == r.ids ? 1 : 0;
    if (c.shared_prefix < 0) continue;
    EXPECT_EQ(r.ids, alone_ids) << c.name << ": B after A with reuse, in the batch, differs from B alone";
    if (preemptions == 0) {  // a preempted batch may have evicted A's blocks; without preemption they stay cached
      EXPECT_GE(r.cached_tokens, c.shared_prefix / setup.block_size * setup.block_size) << c.name;
    }
  }
  std::printf("[ bf16     ] %s batch (block %lld, chunk %lld, %zu requests, %lld preemptions): greedy agrees on%s;"
              " %zu of %zu golden cases identical to the case alone\n",
              name.c_str(), static_cast<long long>(setup.block_size), static_cast<long long>(setup.max_prefill_chunk),
              batch.size(), static_cast<long long>(preemptions), agreement.c_str(), same_as_alone, golden.size());
  expect_pools_empty(alone);
  if (num_preemptions) *num_preemptions = preemptions;
}

class CudaBatch : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { TIDE_REQUIRE_GPU(); }
};

TEST_P(CudaBatch, GoldenGreedyIdsWithRandomOtherRequests) {
  check_batch(GetParam(), EngineSetup{}, 8, 1);
  // Small chunks and step budgets, few sequences at once: prefill chunks and decodes share most steps.
  check_batch(GetParam(), EngineSetup{4, int64_t{256} << 20, 24, 40, 5}, 10, 2);
}

TEST_P(CudaBatch, GoldenGreedyIdsWhenPreempted) {
  int64_t preemptions = 0;
  check_batch(GetParam(), EngineSetup{4, kSmallKvBudget, 32, 256, 256}, 10, 3, &preemptions);
  EXPECT_GT(preemptions, 0);
}

// --- chunked prefill

class CudaChunkedPrefill : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { TIDE_REQUIRE_GPU(); }
};

std::vector<float> flat(const std::vector<std::vector<float>>& rows) {
  std::vector<float> out;
  for (const auto& r : rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

TEST_P(CudaChunkedPrefill, LogitsDoNotDependOnChunkOrBlockSizeBeyondBf16Noise) {
  const nlohmann::json g = test::read_json(fixture(GetParam()) / "golden.json");
  const SafetensorsFile tensors = SafetensorsFile::open(fixture(GetParam()) / "golden.safetensors");
  const int64_t window = ModelConfig::from_dir(fixture(GetParam())).layers.front().window;
  ASSERT_GT(window, 0);
  Engine whole = cuda_engine(GetParam(), EngineSetup{});
  std::vector<std::vector<float>> one_chunk;
  for (const auto& c : g["cases"]) {
    ASSERT_LE(c["prompt_ids"].size(), size_t{512});  // one chunk of the default max_prefill_chunk
    one_chunk.push_back(flat(whole.prompt_logits(test::ids_of(c["prompt_ids"]), /*all_positions=*/true)));
  }
  // Chunks below and above the window, none a multiple of the block size; blocks 1, 5, 16, 64.
  const std::vector<std::pair<int64_t, int64_t>> setups = {
      {1, 7}, {5, 3}, {5, window + 1}, {16, window - 1}, {16, 2 * window + 3}, {64, 33}, {64, 4 * window + 1}};
  for (const auto& [block, chunk] : setups) {
    EngineSetup s;
    s.block_size = block;
    s.max_prefill_chunk = chunk;
    Engine engine = cuda_engine(GetParam(), s);
    double worst_vs_one = 0, worst_vs_reference = 0;  // as fractions of the case's hf_bf16_rel_err
    std::string worst_case;
    for (size_t i = 0; i < g["cases"].size(); ++i) {
      const auto& c = g["cases"][i];
      const std::string what = c["name"].get<std::string>() + " block " + std::to_string(block) + " chunk " +
                               std::to_string(chunk);
      const double hf = c["hf_bf16_rel_err"].get<double>();
      const std::vector<float> got = flat(engine.prompt_logits(test::ids_of(c["prompt_ids"]), true));
      const std::vector<float> want = test::golden_tensor(tensors, c["logits_tensor"]);
      ASSERT_EQ(got.size(), want.size()) << what;
      const double vs_one = test::rel_err(got, one_chunk[i]), vs_reference = test::rel_err(got, want);
      EXPECT_LT(vs_one, hf) << what << ": against the one-chunk logits";
      EXPECT_LT(vs_reference, 2 * hf) << what << ": against the reference";
      if (vs_one / hf > worst_vs_one) worst_case = c["name"].get<std::string>();
      worst_vs_one = std::max(worst_vs_one, vs_one / hf);
      worst_vs_reference = std::max(worst_vs_reference, vs_reference / hf);
    }
    std::printf("[ bf16     ] %s block %lld chunk %lld: rel err vs one chunk <= %.3f (%s), vs reference <= %.3f "
                "(x hf_bf16_rel_err)\n",
                GetParam().c_str(), static_cast<long long>(block), static_cast<long long>(chunk), worst_vs_one,
                worst_case.c_str(), worst_vs_reference);
    expect_pools_empty(engine);
  }
}

TEST_P(CudaChunkedPrefill, LongPromptInChunksBetweenOtherRequestsDecodes) {
  // 24 tokens a step, 7 per prompt: the long prompt takes dozens of steps, each shared with the golden cases'
  // decodes (and their prefill chunks at first).
  const nlohmann::json g = test::read_json(fixture(GetParam()) / "golden.json");
  Engine engine = cuda_engine(GetParam(), EngineSetup{16, int64_t{256} << 20, 7, 24, 256});
  Engine reference = cpu_reference(GetParam());
  std::vector<GoldenCase> cases;
  for (const GoldenCase& c : golden_cases(g)) {
    if (c.shared_prefix < 0) cases.push_back(c);
  }
  const size_t num_decoding = cases.size();
  GoldenCase long_prompt{"long prompt", test::ids_of(g["cases"].back()["prompt_ids"]), {}};
  long_prompt.want = reference.generate(long_prompt.prompt, greedy(16)).ids;  // the f32 greedy ids
  cases.insert(cases.begin() + 1, long_prompt);
  const size_t long_index = 1;

  std::vector<BatchRequest> batch;
  for (const GoldenCase& c : cases) batch.push_back(BatchRequest{c.prompt, greedy(c.want.size())});
  std::vector<size_t> emitted(batch.size(), 0), emitted_before_long(batch.size(), 0);
  const std::vector<GenerateResult> results = engine.generate_batch(batch, [&](size_t i, int32_t) {
    if (i == long_index && emitted[i] == 0) emitted_before_long = emitted;
    ++emitted.at(i);
  });
  ASSERT_EQ(results.size(), batch.size());
  ASSERT_GT(long_prompt.prompt.size(), size_t{7 * 20});
  const double noise = test::bf16_logit_noise(g);
  std::string agreement;
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(results[i].finish_reason, "length") << cases[i].name;
    const test::GreedyAgreement a = test::expect_greedy_within_bf16_noise(
        reference, cases[i].prompt, cases[i].want, results[i].ids, noise, GetParam() + " " + cases[i].name);
    append_agreement(agreement, a);
    if (i == long_index) continue;
    // Interleaved: the others were already decoding, and not yet done, when the long prompt's prefill ended.
    EXPECT_GT(emitted_before_long[i], size_t{0}) << cases[i].name;
    EXPECT_LT(emitted_before_long[i], cases[i].want.size()) << cases[i].name;
  }
  std::printf("[ bf16     ] %s long prompt (%zu ids, chunks of 7) beside %zu decoding requests: greedy agrees on%s\n",
              GetParam().c_str(), long_prompt.prompt.size(), num_decoding, agreement.c_str());
  expect_pools_empty(engine);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaBatch, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"));
INSTANTIATE_TEST_SUITE_P(Fixtures, CudaChunkedPrefill, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"));

}  // namespace
}  // namespace tide
