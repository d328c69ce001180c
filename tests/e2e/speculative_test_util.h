// Helpers of the speculative decoding tests through the engine (speculative_test.cpp,
// speculative_draft_test.cpp, speculative_draft_cache_test.cpp): engine options with a draft, a batch run,
// an arena's size in requests, and the checks they share.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kv/kv_cache_manager.h"
#include "model/cohere2.h"
#include "runtime/engine.h"

namespace tide::spec_test {

inline EngineOptions draft_options(int64_t block_size, int64_t kv_cache_memory, int k, const std::filesystem::path& draft) {
  EngineOptions e;
  e.block_size = block_size;
  e.kv_cache_memory = kv_cache_memory;
  e.max_prefill_chunk = 64;
  if (k > 0) {
    e.speculative = spec::SpeculativeConfig::parse(nlohmann::json{{"model", draft.string()},
                                                                   {"num_speculative_tokens", k}}.dump());
  }
  return e;
}

// kv_cache_memory for `requests` requests of at most 100 positions of `model` at once (4 positions per block,
// chunks of 64).
inline int64_t arena_bytes(const Cohere2Model& model, int requests) {
  const KvCacheManager probe(4, model.config().group_windows(), KvArenaSpec{}, false);
  return requests * probe.max_arena_blocks(100, 64) * model.kv_block_bytes(4, KvCacheDtype::kAuto);
}

inline std::vector<GenerateResult> run(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                                const GenerateOptions& options) {
  std::vector<BatchRequest> batch;
  for (const auto& p : prompts) batch.push_back(BatchRequest{p, options});
  return engine.generate_batch(batch);
}

inline void expect_same(const std::vector<GenerateResult>& got, const std::vector<GenerateResult>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].samples.size(), want[i].samples.size());
    for (size_t n = 0; n < want[i].samples.size(); ++n) {
      const SampleResult& g = got[i].samples[n];
      const SampleResult& w = want[i].samples[n];
      ASSERT_EQ(g.ids, w.ids) << what << ", prompt " << i << " sample " << n;
      ASSERT_EQ(g.logprobs.size(), w.logprobs.size());
      for (size_t j = 0; j < w.logprobs.size(); ++j) {
        EXPECT_EQ(g.logprobs[j].id, w.logprobs[j].id);
        EXPECT_NEAR(g.logprobs[j].logprob, w.logprobs[j].logprob, 1e-4) << what << ", token " << j;
      }
    }
  }
}

// Neither cache holds a block once every request finished, and the draft's cache is consistent.
inline void expect_caches_empty(const Engine& engine) {
  EXPECT_EQ(engine.kv_report().arena.in_use_blocks, 0);
  ASSERT_NE(engine.draft_kv_cache(), nullptr);
  EXPECT_EQ(engine.draft_kv_cache()->pool().stats().in_use_blocks, 0);
  engine.draft_kv_cache()->check_invariants({});
}

}  // namespace tide::spec_test
