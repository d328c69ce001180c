// The window-aware KV cache end to end on the fixture models: the seed's reproduction (a long prompt A,
// then B sharing A's start, with prefix reuse on), randomized requests against the same requests without
// reuse (with the activation-dtype cache and with the FP8 one), the sliding groups' memory bound on a long
// generation, and hits served from the host tier.
#include <gtest/gtest.h>

#include <random>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::fixture;

struct Options {
  int64_t block_size = 16;
  int64_t kv_cache_memory = int64_t{64} << 20;
  int64_t host_kv_cache_memory = 0;
  bool prefix_caching = true;
  int64_t chunk = 512;
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
};

EngineOptions engine_options(const Options& o) {
  EngineOptions e;
  e.block_size = o.block_size;
  e.kv_cache_memory = o.kv_cache_memory;
  e.host_kv_cache_memory = o.host_kv_cache_memory;
  e.enable_prefix_caching = o.prefix_caching;
  e.max_prefill_chunk = o.chunk;
  e.kv_cache_dtype = o.kv_cache_dtype;
  return e;
}

Engine make_engine(const std::string& model, const Options& o) {
  return Engine(fixture(model), std::make_unique<CpuBackend>(), engine_options(o));
}

// The device budget of an arena that holds `blocks` blocks of `model` with `o`'s block size and KV dtype.
int64_t memory_for_blocks(const std::string& model, const Options& o, int64_t blocks) {
  CpuBackend backend;
  const Cohere2Model m = Cohere2Model::load(fixture(model), backend);
  return blocks * m.kv_block_bytes(o.block_size, o.kv_cache_dtype);
}

// The arena blocks one sequence of `num_tokens` takes at most (every group's need summed).
int64_t blocks_for_sequence(const std::string& model, const Options& o, int64_t num_tokens) {
  const KvCacheManager probe(o.block_size, ModelConfig::from_dir(fixture(model)).group_windows(), KvArenaSpec{}, false);
  return probe.max_arena_blocks(num_tokens, o.chunk);
}

int64_t window_of(const std::string& model) { return ModelConfig::from_dir(fixture(model)).layers.front().window; }

GenerateResult greedy(Engine& engine, const std::vector<int32_t>& prompt, int64_t n) {
  GenerateOptions options;
  options.max_tokens = n;
  options.ignore_eos = true;
  return engine.generate(prompt, options);
}

class PrefixCacheTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefixCacheTest, SeedReproductionLongPromptThenSharedPrefix) {
  const std::string model = GetParam();
  const nlohmann::json g = test::read_json(fixture(model) / "golden.json");
  const SafetensorsFile tensors = SafetensorsFile::open(fixture(model) / "golden.safetensors");
  const int64_t w = window_of(model);
  for (int64_t block : {int64_t{3}, int64_t{16}, w + 8}) {  // smaller and larger than the window
    for (const auto& c : g["prefix_sharing"]) {
      const std::vector<int32_t> a = test::ids_of(c["a_ids"]), b = test::ids_of(c["b_ids"]);
      Engine engine = make_engine(model, {.block_size = block});
      greedy(engine, a, 3);
      const GenerateResult got = greedy(engine, b, 16);
      EXPECT_EQ(got.ids, test::ids_of(c["b_greedy_ids"])) << "block " << block;
      // The largest block-aligned prefix of the shared tokens (and at most T - 1).
      const int64_t shared = std::min<int64_t>(c["shared_prefix"].get<int64_t>(), static_cast<int64_t>(b.size()) - 1);
      EXPECT_EQ(got.cached_tokens, shared / block * block) << "block " << block;
      if (block == 16 && c["shared_prefix"] == 49) {
        EXPECT_EQ(got.cached_tokens, 48);
      }

      Engine logits_engine = make_engine(model, {.block_size = block});
      greedy(logits_engine, a, 3);
      const auto b_logits = logits_engine.prompt_logits(b, /*all_positions=*/false);
      const std::vector<float> want = test::golden_tensor(tensors, c["b_last_tensor"]);
      EXPECT_LT(test::rel_l2(b_logits[0].data(), want.data(), want.size()), 1e-4) << "block " << block;
      int64_t hits = 0;
      for (const KvGroupReport& r : logits_engine.kv_report().groups) hits += r.stats.hits;
      EXPECT_EQ(hits > 0, got.cached_tokens > 0);
    }
  }
}

TEST_P(PrefixCacheTest, RandomRequestsEqualTheSameRequestsWithoutReuse) {
  const std::string model = GetParam();
  const int64_t w = window_of(model);
  std::mt19937 rng(20261202);
  std::uniform_int_distribution<int32_t> token(17, 1000);
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 3; ++i) {
    prefixes.emplace_back(static_cast<size_t>(w * (3 + 2 * i)));
    for (int32_t& t : prefixes.back()) t = token(rng);
  }
  const int64_t longest = 7 * w + 2 * w + 6;
  for (const auto& [block, kv_dtype] :
       {std::pair{int64_t{5}, KvCacheDtype::kAuto}, std::pair{w + 3, KvCacheDtype::kAuto},
        std::pair{int64_t{5}, KvCacheDtype::kFp8}, std::pair{w + 3, KvCacheDtype::kFp8}}) {
    // An arena of ~4 of the longest requests (evictions), a host tier, chunks smaller than the window.
    Options small{.block_size = block, .host_kv_cache_memory = int64_t{4} << 20, .chunk = w / 2 + 1,
                  .kv_cache_dtype = kv_dtype};
    small.kv_cache_memory = memory_for_blocks(model, small, 4 * blocks_for_sequence(model, small, longest));
    Engine reuse = make_engine(model, small);
    Options plain = small;
    plain.prefix_caching = false;
    plain.kv_cache_memory = int64_t{64} << 20;
    Engine fresh = make_engine(model, plain);
    int64_t total_cached = 0;
    for (int r = 0; r < 16; ++r) {
      const std::vector<int32_t>& prefix = prefixes[rng() % prefixes.size()];
      std::vector<int32_t> prompt(prefix.begin(), prefix.begin() + static_cast<std::ptrdiff_t>(rng() % prefix.size() + 1));
      const size_t tail = rng() % static_cast<size_t>(2 * w);
      for (size_t i = 0; i < tail; ++i) prompt.push_back(token(rng));
      const GenerateResult got = greedy(reuse, prompt, 6);
      const GenerateResult want = greedy(fresh, prompt, 6);
      EXPECT_EQ(got.ids, want.ids) << "request " << r << " block " << block << " kv "
                                   << (kv_dtype == KvCacheDtype::kFp8 ? "fp8" : "auto");
      EXPECT_EQ(want.cached_tokens, 0);
      total_cached += got.cached_tokens;
      EXPECT_EQ(reuse.kv_cache().pool().num_in_use(), 0);
    }
    EXPECT_GT(total_cached, 0) << "no request reused anything: the test proves nothing";
  }
}

TEST(PrefixCache, SlidingGroupsHoldOnlyTheWindowOnALongGeneration) {
  const std::string model = "cohere2-tiny";  // W = 16
  const int64_t w = window_of(model);
  const std::vector<int32_t> prompt =
      test::ids_of(test::read_json(fixture(model) / "golden.json")["generate"][0]["prompt_ids"]);
  for (int64_t block : {int64_t{4}, int64_t{16}}) {
    Engine engine = make_engine(model, {.block_size = block});
    greedy(engine, prompt, 2000);
    const int64_t chunk_blocks = (static_cast<int64_t>(prompt.size()) + block - 1) / block;
    for (const KvGroupReport& r : engine.kv_report().groups) {
      if (r.window == 0) {
        EXPECT_GE(r.stats.peak_in_use_blocks, (static_cast<int64_t>(prompt.size()) + 2000 - 1) / block);
      } else {
        EXPECT_LE(r.stats.peak_in_use_blocks, (w - 1 + block - 1) / block + 1 + chunk_blocks) << "block " << block;
      }
      EXPECT_EQ(r.stats.in_use_blocks, 0);
    }
  }
}

TEST(PrefixCache, HitsComeBackFromTheHostTier) {
  const std::string model = "cohere2-tiny";
  const nlohmann::json c = test::read_json(fixture(model) / "golden.json")["prefix_sharing"][2];
  const std::vector<int32_t> a = test::ids_of(c["a_ids"]), b = test::ids_of(c["b_ids"]);
  std::vector<int32_t> other(220);  // an unrelated prompt that needs the whole arena
  for (size_t i = 0; i < other.size(); ++i) other[i] = static_cast<int32_t>(100 + (i * 37) % 800);

  auto run = [&](int64_t host_memory) {
    Options o{.block_size = 16, .host_kv_cache_memory = host_memory, .chunk = 64};
    // An arena of exactly what the other prompt takes: it evicts every block of A's.
    o.kv_cache_memory = memory_for_blocks(model, o, blocks_for_sequence(model, o, static_cast<int64_t>(other.size())));
    Engine engine = make_engine(model, o);
    greedy(engine, a, 1);
    greedy(engine, other, 1);
    GenerateResult result = greedy(engine, b, 16);
    return std::pair<GenerateResult, KvReport>{result, engine.kv_report()};
  };
  const auto [without_host, stats_without] = run(0);
  const auto [with_host, stats_with] = run(int64_t{8} << 20);
  EXPECT_EQ(with_host.ids, test::ids_of(c["b_greedy_ids"]));
  EXPECT_EQ(without_host.ids, test::ids_of(c["b_greedy_ids"]));
  const int64_t expected = c["shared_prefix"].get<int64_t>() / 16 * 16;
  EXPECT_EQ(with_host.cached_tokens, expected);
  EXPECT_LT(without_host.cached_tokens, expected) << "the arena kept A's blocks: the host tier was not needed";
  for (const KvGroupReport& r : stats_with.groups) EXPECT_GT(r.stats.host_blocks, 0);
  for (const KvGroupReport& r : stats_without.groups) EXPECT_EQ(r.stats.host_blocks, 0);
  EXPECT_GT(stats_with.arena.host_capacity_blocks, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixCacheTest, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"));

}  // namespace
}  // namespace tide
