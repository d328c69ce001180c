// Speculative decoding with a draft model through the engine (CPU): every request generates the same ids and
// logprobs as without speculation, whichever model drafts (the model itself, so nearly every draft is accepted;
// another fixture of the same vocabulary, so most are rejected), for draft lengths 1 .. 6, block sizes below,
// at and beyond both models' windows, with preemption, sampled requests, a draft shorter than the model and a
// draft cache too small for every sequence; no block of either cache stays in use. A draft whose vocabulary
// differs is refused. (The draft's blocks in the model's arena, disable_by_batch_size and the host tier:
// speculative_draft_cache_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../test_util.h"
#include "speculative_test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/forwarding_backend.h"
#include "runtime/draft_proposer.h"
#include "runtime/engine.h"
#include "tokenizer/tokenizer.h"

namespace tide {
namespace {

using test::fixture;
using namespace spec_test;

struct Pair {
  const char* model;
  const char* draft;
};

void PrintTo(const Pair& p, std::ostream* os) { *os << p.model << " drafted by " << p.draft; }

class DraftTest : public ::testing::TestWithParam<Pair> {};

TEST_P(DraftTest, GreedyIdsAreTheSameAsWithout) {
  const Pair pair = GetParam();
  const bool self = std::string(pair.model) == pair.draft;
  const ModelConfig config = ModelConfig::from_dir(fixture(pair.model));
  const ModelConfig draft_config = ModelConfig::from_dir(fixture(pair.draft));
  const int64_t window = std::max(config.layers.front().window, draft_config.layers.front().window);
  const auto prompts = test::quoting_prompts(config.vocab_size, 7);
  GenerateOptions options;
  options.max_tokens = 40;
  options.ignore_eos = true;
  options.logprobs = 2;
  Engine plain(fixture(pair.model), std::make_unique<CpuBackend>(), draft_options(16, int64_t{64} << 20, 0, {}));
  const std::vector<GenerateResult> want = run(plain, prompts, options);
  const int64_t blocks[] = {3, 16, window + 8};
  for (int k = 1; k <= 6; ++k) {
    const int64_t block = blocks[(k - 1) % 3];
    Engine engine(fixture(pair.model), std::make_unique<CpuBackend>(),
                  draft_options(block, int64_t{64} << 20, k, fixture(pair.draft)));
    const std::string what = fmt::format("{} drafted by {}, k {}, block {}", pair.model, pair.draft, k, block);
    expect_same(run(engine, prompts, options), want, what);
    const EngineStats s = engine.stats();
    EXPECT_GT(s.spec_draft_steps, 0) << what;
    EXPECT_GT(s.spec_verifies, 0) << what;
    EXPECT_LE(s.spec_accepted_tokens, s.spec_draft_tokens);
    EXPECT_EQ(s.generation_tokens, static_cast<int64_t>(prompts.size()) * options.max_tokens);
    // The model drafting for itself agrees with itself but for rounding ties.
    if (self) EXPECT_GE(s.spec_accepted_tokens * 10, s.spec_draft_tokens * 9) << what;
    if (self && k == 4) {
      std::printf("[ spec     ] %s drafting for itself, k 4: %ld of %ld drafted tokens accepted, %ld draft steps\n",
                  pair.model, static_cast<long>(s.spec_accepted_tokens), static_cast<long>(s.spec_draft_tokens),
                  static_cast<long>(s.spec_draft_steps));
    }
    expect_caches_empty(engine);
  }
}

// An arena too small for every request at once: requests are preempted and recomputed between verify steps
// (their draft caches given back and rebuilt); max_tokens cuts a run of accepted drafts; a request with
// speculation turned off never drafts.
TEST_P(DraftTest, PreemptionMaxTokensAndPerRequestOff) {
  const Pair pair = GetParam();
  const ModelConfig config = ModelConfig::from_dir(fixture(pair.model));
  auto prompts = test::quoting_prompts(config.vocab_size, 13);
  const auto more = test::quoting_prompts(config.vocab_size, 17);
  prompts.insert(prompts.end(), more.begin(), more.end());
  GenerateOptions options;
  options.max_tokens = 37;
  options.ignore_eos = true;
  CpuBackend backend;
  const Cohere2Model m = Cohere2Model::load(fixture(pair.model), backend);
  const Cohere2Model d = Cohere2Model::load(fixture(pair.draft), backend);
  // The model's share: about two of the longest requests (prompt and output at most 100 tokens).
  const int64_t model_bytes = arena_bytes(m, 2);
  const auto per_position = [](const Cohere2Model& x) {
    return static_cast<double>(x.kv_block_bytes(4, KvCacheDtype::kAuto)) * static_cast<double>(x.config().groups.size());
  };
  // A draft in the model's arena gives its blocks back before a request is preempted; one of its own takes
  // its share beside the model's.
  const bool shared = draft_arena_layout(m, draft_options(4, model_bytes, 5, fixture(pair.draft)), d).has_value();
  const auto tight = shared ? model_bytes
                            : static_cast<int64_t>(static_cast<double>(model_bytes) *
                                                   (1 + per_position(d) / per_position(m)));
  Engine plain(fixture(pair.model), std::make_unique<CpuBackend>(), draft_options(4, model_bytes, 0, {}));
  const std::vector<GenerateResult> want = run(plain, prompts, options);
  Engine engine(fixture(pair.model), std::make_unique<CpuBackend>(), draft_options(4, tight, 5, fixture(pair.draft)));
  EXPECT_EQ(engine.draft_kv_cache()->shared_pool() == engine.kv_cache().shared_pool(), shared);
  expect_same(run(engine, prompts, options), want, "preempted");
  EXPECT_GT(engine.stats().num_preemptions, 0);
  EXPECT_GT(engine.stats().spec_verifies, 0);
  expect_caches_empty(engine);

  GenerateOptions off = options;
  off.speculative = false;
  const EngineStats before = engine.stats();
  expect_same(run(engine, prompts, off), want, "speculation off");
  EXPECT_EQ(engine.stats().spec_verifies, before.spec_verifies);
  EXPECT_EQ(engine.stats().spec_draft_steps, before.spec_draft_steps);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DraftTest,
                         ::testing::Values(Pair{"cohere2-tiny", "cohere2-tiny"},
                                           Pair{"cohere2-tiny", "cohere2-tiny-hd128"},
                                           Pair{"cohere2-tiny-hd128", "cohere2-tiny"}),
                         [](const ::testing::TestParamInfo<Pair>& info) {
                           std::string name = std::string(info.param.model) + "_by_" + info.param.draft;
                           for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name;
                         });

// The CPU backend without speculative sampling against the draft's distribution: the engine then drafts the
// draft's argmax for sampled requests too.
struct CpuHolder {
  CpuBackend cpu;
};
class PointMassDrafts : private CpuHolder, public ForwardingBackend {
 public:
  PointMassDrafts() : ForwardingBackend(cpu) {}
  bool supports_draft_sampling() const override { return false; }
};

// Two prompts that quote a passage (cut after 40 and 120 characters), in the demo model's tokens.
std::vector<std::vector<int32_t>> demo_quoting_prompts(const std::filesystem::path& dir) {
  const Tokenizer tokenizer = Tokenizer::from_dir(dir);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t cut : {40, 120}) prompts.push_back(tokenizer.encode(test::quoted_passage(cut)));
  return prompts;
}

// Sampled requests on the demo model drafting for itself, on prompts that quote a passage (temperature,
// top-k / top-p, penalties, two samples per prompt). Drafts that are the draft's argmax keep every draw, so
// ids equal those without speculation; drafts drawn from the draft's distribution and checked against it
// (the CPU backend's default) are accepted more often.
TEST(DraftDemo, SampledRequestsPointMassAndDistributionDrafts) {
  const std::filesystem::path dir = test::bundled_model("tide-demo");
  const std::vector<std::vector<int32_t>> prompts = demo_quoting_prompts(dir);
  GenerateOptions options;
  options.max_tokens = 40;
  options.ignore_eos = true;
  options.n = 2;
  options.sampling.temperature = 0.7;
  options.sampling.top_k = 40;
  options.sampling.top_p = 0.95;
  options.sampling.repetition_penalty = 1.05;
  options.sampling.presence_penalty = 0.3;
  options.sampling.seed = 99;
  options.logprobs = 1;
  Engine plain(dir, std::make_unique<CpuBackend>(), draft_options(16, int64_t{64} << 20, 0, {}));
  const std::vector<GenerateResult> want = run(plain, prompts, options);
  Engine point_mass(dir, std::make_unique<PointMassDrafts>(), draft_options(16, int64_t{64} << 20, 4, dir));
  expect_same(run(point_mass, prompts, options), want, "demo, sampled, point-mass drafts");
  const EngineStats a = point_mass.stats();
  expect_caches_empty(point_mass);
  Engine engine(dir, std::make_unique<CpuBackend>(), draft_options(16, int64_t{64} << 20, 4, dir));
  const std::vector<GenerateResult> got = run(engine, prompts, options);
  const EngineStats b = engine.stats();
  std::printf("[ spec     ] demo model drafting for itself, sampled: argmax drafts %ld of %ld accepted, drafts from "
              "its distribution %ld of %ld\n", static_cast<long>(a.spec_accepted_tokens),
              static_cast<long>(a.spec_draft_tokens), static_cast<long>(b.spec_accepted_tokens),
              static_cast<long>(b.spec_draft_tokens));
  EXPECT_GE(a.spec_accepted_tokens, 20);
  EXPECT_GT(static_cast<double>(b.spec_accepted_tokens) / static_cast<double>(b.spec_draft_tokens),
            static_cast<double>(a.spec_accepted_tokens) / static_cast<double>(a.spec_draft_tokens));
  for (const GenerateResult& r : got) {
    for (const SampleResult& sample : r.samples) EXPECT_EQ(sample.ids.size(), 40u);
  }
  expect_caches_empty(engine);
}

// The bundled draft (models/tide-demo-draft, distilled from the demo model by tools/demo_model/make_draft_model.py)
// on prompts that quote a passage: greedy ids are those without speculation, and over a third of the drafts are
// accepted (42% measured; an untrained draft of this shape agrees with the demo model's argmax at 2% of positions).
TEST(DraftDemo, BundledDraftKeepsGreedyIdsAndIsAccepted) {
  const std::filesystem::path dir = test::bundled_model("tide-demo");
  const std::vector<std::vector<int32_t>> prompts = demo_quoting_prompts(dir);
  GenerateOptions options;
  options.max_tokens = 64;
  options.ignore_eos = true;
  Engine plain(dir, std::make_unique<CpuBackend>(), draft_options(16, int64_t{64} << 20, 0, {}));
  Engine engine(dir, std::make_unique<CpuBackend>(),
                draft_options(16, int64_t{64} << 20, 4, test::bundled_model("tide-demo-draft")));
  expect_same(run(engine, prompts, options), run(plain, prompts, options), "demo model, bundled draft");
  const EngineStats s = engine.stats();
  std::printf("[ spec     ] demo model, bundled draft, greedy: %ld of %ld drafted tokens accepted\n",
              static_cast<long>(s.spec_accepted_tokens), static_cast<long>(s.spec_draft_tokens));
  EXPECT_GT(s.spec_accepted_tokens * 3, s.spec_draft_tokens);
  expect_caches_empty(engine);
}

// The upper tail of the chi-square distribution with `df` degrees of freedom at z standard deviations
// (Wilson-Hilferty).
double chi_square_bound(int df, double z) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Sampling keeps the distribution: the tokens at output positions 1 .. 3 (the ones verify steps decide) over
// many seeds, with drafts drawn from the draft's distribution q and checked against the model's p, against
// the same without speculation: a two-sample chi-square test per position. The demo model drafts for itself,
// but p carries penalties q does not (the draft's rows have none): the prompt quotes a passage the draft
// continues while a strong repetition penalty steers p away from it, so many drafts are refused and residuals
// drawn (accepting every draft fails the test); temperature with top-k and a presence penalty; a higher
// temperature with top-p, min-p, a frequency penalty and a logit bias against the quoted words (which the
// draft does not see either). Fixed seeds: the counts are deterministic.
TEST(DraftDistribution, NextTokenFrequenciesMatchWithoutSpeculation) {
  const std::filesystem::path dir = test::bundled_model("tide-demo");
  const std::vector<int32_t> prompt = Tokenizer::from_dir(dir).encode(
      "The river rises in the hills above the town and runs through the old mill. Again: The river rises in the");
  struct Params {
    const char* name;
    double temperature, top_p, min_p, repetition, presence, frequency;
    int64_t top_k;
    float bias;  // on the tokens of " hills above the town"
  };
  const Params cases[] = {{"temperature 0.9, top-k 20, repetition 2, presence 0.6", 0.9, 1.0, 0.0, 2.0, 0.6, 0.0, 20, 0},
                          {"temperature 1.3, top-p 0.9, min-p 0.05, frequency 0.5, logit_bias -2", 1.3, 0.9, 0.05, 1.0,
                           0.0, 0.5, 0, -2.0f}};
  const std::vector<int32_t> biased = Tokenizer::from_dir(dir).encode(" hills above the town", false);
  const int samples = 1000;
  Engine plain(dir, std::make_unique<CpuBackend>(), draft_options(16, int64_t{64} << 20, 0, {}));
  Engine drafted(dir, std::make_unique<CpuBackend>(), draft_options(16, int64_t{64} << 20, 3, dir));
  for (const Params& c : cases) {
    std::vector<BatchRequest> batch;
    for (int i = 0; i < samples; ++i) {
      GenerateOptions o;
      o.max_tokens = 4;
      o.ignore_eos = true;
      o.sampling.temperature = c.temperature;
      o.sampling.top_k = c.top_k;
      o.sampling.top_p = c.top_p;
      o.sampling.min_p = c.min_p;
      o.sampling.repetition_penalty = c.repetition;
      o.sampling.presence_penalty = c.presence;
      o.sampling.frequency_penalty = c.frequency;
      if (c.bias != 0) {
        for (int32_t id : biased) o.sampling.logit_bias.emplace_back(id, c.bias);
      }
      o.sampling.seed = 1000 + static_cast<uint64_t>(i);
      batch.push_back(BatchRequest{prompt, o});
    }
    const EngineStats before = drafted.stats();
    // In groups small enough for one draft step to catch every new sequence up (each speculates from its
    // second token on).
    std::vector<GenerateResult> a, b;
    for (size_t first = 0; first < batch.size(); first += 50) {
      const std::span<const BatchRequest> group = std::span(batch).subspan(first, std::min<size_t>(50, batch.size() - first));
      for (GenerateResult& r : plain.generate_batch(group)) a.push_back(std::move(r));
      for (GenerateResult& r : drafted.generate_batch(group)) b.push_back(std::move(r));
    }
    const EngineStats after = drafted.stats();
    const int64_t verified = after.spec_draft_tokens - before.spec_draft_tokens;
    const int64_t accepted = after.spec_accepted_tokens - before.spec_accepted_tokens;
    EXPECT_GE(verified, 2 * samples) << c.name;  // two drafts from the second token on, at least
    EXPECT_GT(accepted, 0) << c.name;
    EXPECT_LT(accepted, verified) << c.name << ": no draft refused, no residual drawn";
    for (size_t pos = 1; pos < 4; ++pos) {
      std::map<int32_t, std::pair<int, int>> counts;
      for (int i = 0; i < samples; ++i) {
        ++counts[a[static_cast<size_t>(i)].ids[pos]].first;
        ++counts[b[static_cast<size_t>(i)].ids[pos]].second;
      }
      // Categories of at least 10 draws in all, the rest lumped together.
      double stat = 0;
      int categories = 0, rest_a = 0, rest_b = 0;
      for (const auto& [id, n] : counts) {
        if (n.first + n.second >= 10) {
          stat += std::pow(n.first - n.second, 2) / (n.first + n.second);
          ++categories;
        } else {
          rest_a += n.first;
          rest_b += n.second;
        }
      }
      if (rest_a + rest_b > 0) {
        stat += std::pow(rest_a - rest_b, 2) / (rest_a + rest_b);
        ++categories;
      }
      ASSERT_GE(categories, 3) << c.name;
      const double bound = chi_square_bound(categories - 1, 3.7);  // p ~ 1e-4
      std::printf("[ spec     ] %s, position %zu: chi-square %.1f over %d categories (bound %.1f), %ld of %ld "
                  "drafts accepted\n", c.name, pos, stat, categories, bound, static_cast<long>(accepted),
                  static_cast<long>(verified));
      EXPECT_LT(stat, bound) << c.name << ", position " << pos;
    }
  }
  expect_caches_empty(drafted);
}

// A copy of fixture `name` in `to` whose config.json is edited by `edit`.
void copy_fixture(const std::string& name, const std::filesystem::path& to,
                  const std::function<void(nlohmann::json&)>& edit) {
  std::filesystem::copy(fixture(name), to, std::filesystem::copy_options::recursive);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(to / "config.json"));
  edit(config);
  std::ofstream(to / "config.json") << config.dump(2);
}

// A draft shorter than the sequences stops drafting for them past its length without changing an id.
TEST(DraftLimits, DraftShorterThanTheSequences) {
  const test::TempDir tmp;
  const std::filesystem::path short_draft = tmp.path() / "short";
  copy_fixture("cohere2-tiny", short_draft, [](nlohmann::json& c) { c["max_position_embeddings"] = 60; });
  const ModelConfig config = ModelConfig::from_dir(fixture("cohere2-tiny"));
  const auto prompts = test::quoting_prompts(config.vocab_size, 31);  // 28 .. 40 tokens
  GenerateOptions options;
  options.max_tokens = 40;
  options.ignore_eos = true;
  Engine plain(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(), draft_options(8, int64_t{64} << 20, 0, {}));
  const std::vector<GenerateResult> want = run(plain, prompts, options);
  Engine engine(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(),
                draft_options(8, int64_t{64} << 20, 4, short_draft));
  expect_same(run(engine, prompts, options), want, "short draft");
  const EngineStats s = engine.stats();
  EXPECT_GT(s.spec_accepted_tokens, 0);
  // Past 60 positions nobody drafts: fewer verifications than tokens generated after the prompts.
  EXPECT_LT(s.spec_verifies, static_cast<int64_t>(prompts.size()) * options.max_tokens / 2);
  expect_caches_empty(engine);
}

// The greedy continuation of `prompt` by the model of `dir` alone (the reference for what a draft must be).
std::vector<int32_t> greedy(const std::filesystem::path& dir, std::span<const int32_t> prompt, int64_t tokens) {
  EngineOptions o;
  o.kv_cache_memory = int64_t{16} << 20;
  Engine engine(dir, std::make_unique<CpuBackend>(), o);
  GenerateOptions g;
  g.max_tokens = tokens;
  g.ignore_eos = true;
  return engine.generate(prompt, g).ids;
}

// DraftProposer alone: its drafts are the draft model's own greedy continuations, after a first round and
// after rounds whose drafts were partly accepted, partly refused, or whose step did not run, and after a round
// skipped (no drafts while the sequences grew); a draft cache
// too small for every sequence drafts for some of them and no other; nothing stays in use afterwards.
TEST(DraftProposer, DraftsAreTheDraftModelsGreedyContinuation) {
  const std::filesystem::path model = fixture("cohere2-tiny"), draft = fixture("cohere2-tiny-hd128");
  ModelExecutor executor(model, std::make_unique<CpuBackend>(), WeightLoadOptions{}, draft);
  const ModelConfig& dc = executor.draft()->config();
  const int64_t block = 4;
  // Room for two sequences of up to 60 positions, four want it.
  const KvCacheManager probe(block, dc.group_windows(), KvArenaSpec{}, false);
  const auto blocks = static_cast<int32_t>(2 * probe.max_arena_blocks(60, 64));
  executor.allocate_draft_kv(block, blocks, KvCacheDtype::kAuto);
  KvCacheManager kv(block, dc.group_windows(), KvArenaSpec{blocks, 0}, true);
  DraftProposer proposer(executor, kv, 256, 64);
  std::vector<std::vector<int32_t>> seqs = test::quoting_prompts(dc.vocab_size, 41);
  const int64_t k = 5;
  std::vector<int32_t> got;
  for (int round = 0; round < 4; ++round) {
    std::vector<DraftRequest> requests;
    for (size_t i = 0; i < seqs.size(); ++i) requests.push_back(DraftRequest{i + 1, seqs[i], k});
    proposer.run(requests);
    int drafted = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      // The draft's committed K/V are of the sequence's own tokens.
      if (const SequenceKv* s = proposer.sequence(i + 1)) {
        ASSERT_LT(s->tokens.size(), seqs[i].size());
        EXPECT_TRUE(std::equal(s->tokens.begin(), s->tokens.end(), seqs[i].begin())) << "round " << round << ", sequence " << i;
      }
      proposer.take(i + 1, k, got);
      if (got.empty()) continue;
      ++drafted;
      // All k drafts, or fewer where the draft cache had fewer blocks.
      std::vector<int32_t> want = greedy(draft, seqs[i], k);
      ASSERT_LE(got.size(), want.size());
      want.resize(got.size());
      ASSERT_EQ(got, want) << "round " << round << ", sequence " << i;
      if (want.size() < 3) continue;
      proposer.take(i + 1, 2, got);
      EXPECT_EQ(got, std::vector<int32_t>(want.begin(), want.begin() + 2));
      // The sequence grows by all drafts; by tokens that part from the drafts at the second (more than a
      // verify step appends after a refused draft: only the agreeing prefix may be kept); or not at all (a
      // step that did not run).
      const auto other = [&](int32_t id) { return static_cast<int32_t>((id + 1) % dc.vocab_size); };
      switch ((round + i) % 3) {
        case 0: seqs[i].insert(seqs[i].end(), want.begin(), want.end()); break;
        case 1: seqs[i].insert(seqs[i].end(), {want[0], other(want[1]), other(want[2])}); break;
        default: break;
      }
    }
    EXPECT_GE(drafted, 1) << "round " << round;
    EXPECT_LT(drafted, 4) << "round " << round << ": the draft cache holds two sequences, not four";
    kv.check_invariants(proposer.live_sequences());
    if (round == 1) {
      // A round without drafts (a step that does not speculate): nothing is handed out, every sequence keeps
      // its blocks, and the next round catches up on the tokens the sequences gained meanwhile.
      const int64_t held = kv.pool().stats().in_use_blocks;
      proposer.skip_round();
      EXPECT_EQ(kv.pool().stats().in_use_blocks, held);
      for (size_t i = 0; i < seqs.size(); ++i) {
        proposer.take(i + 1, k, got);
        EXPECT_TRUE(got.empty()) << "sequence " << i;
        for (int t = 0; t < 3; ++t) seqs[i].push_back(seqs[i][seqs[i].size() / 2]);
      }
    }
  }
  proposer.release(1);
  proposer.release_all();
  EXPECT_EQ(kv.pool().stats().in_use_blocks, 0);
  kv.check_invariants({});
  EXPECT_GT(proposer.num_steps(), 4);
}

TEST(DraftLimits, DraftOfAnotherVocabularyIsRefused) {
  try {
    Engine engine(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(),
                  draft_options(16, int64_t{64} << 20, 4, test::bundled_model("tide-demo")));
    FAIL() << "a draft with 4096 tokens was accepted for a model with 1024";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("vocabulary of 4096 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1024"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Engine(fixture("cohere2-tiny"), std::make_unique<CpuBackend>(),
                      draft_options(16, int64_t{64} << 20, 4, "/nonexistent/draft")),
               Error);
}

}  // namespace
}  // namespace tide
