// Steps of few tokens per sequence run padded (Cohere2Model::forward's graph path: every sequence padded to the
// most tokens of one, the batch to a power of two of sequences, logit rows gathered at their new places). The
// CPU backend records no graphs, but the first such step of a model runs the padded layout eagerly before the
// recording is refused: each case here is that first step, against a model with graphs off (no padding), on
// the same prompts. The logits must match row for row and the KV cache must hold the same values (the padded
// tokens store nothing); the step after it, from that cache, must match too.
#include <cmath>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "../step_runner.h"
#include "backend/cpu/cpu_backend.h"

namespace tide {
namespace {

// The KV cache's values (f32 on the CPU).
std::vector<float> kv_values(test::StepRunner& r) { return r.download_f32(r.kv.front().data); }

struct Case {
  const char* name;
  std::vector<int64_t> tokens;  // per sequence (0: not in the step)
  bool last_only;
  bool padded = true;  // whether the step runs padded (else op by op, as the other model)
};

TEST(PaddedSteps, MatchTheUnpaddedStepAndStoreNothingMore) {
  // Ragged verify steps (three sequences: a fourth padded in), a sequence left out, a uniform step with one
  // logit row per sequence (a draft model catching up), a single sequence of a short chunk; a new sequence
  // (no prompt: no computed positions for its padding) beside a longer one runs op by op.
  const std::vector<Case> cases = {{"ragged, every token", {5, 2, 4, 0, 0}, false},
                                   {"ragged, last tokens", {4, 0, 6, 3, 0}, true},
                                   {"uniform, last tokens", {2, 2, 2, 2, 0}, true},
                                   {"two sequences", {0, 8, 0, 3, 0}, false},
                                   {"one short chunk", {0, 0, 6, 0, 0}, true},
                                   {"a new sequence", {6, 0, 0, 0, 2}, true, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    test::StepRunner padded(std::make_unique<CpuBackend>(), "cohere2-tiny", true, 5),
        plain(std::make_unique<CpuBackend>(), "cohere2-tiny", false, 5);
    const auto vocab = static_cast<int32_t>(padded.model.config().vocab_size);
    // Prompts longer than a padded step's 8 tokens (both run them op by op), one past the sliding window.
    const std::vector<int64_t> prompts = {30, 12, 90, 17};  // sequence 4 has none
    for (int s = 0; s < 4; ++s) {
      const auto prompt = test::spread_ids(prompts[static_cast<size_t>(s)], s + 1, vocab);
      ASSERT_EQ(padded.step({s}, {prompt}, true), plain.step({s}, {prompt}, true));
    }
    std::vector<int> which;
    std::vector<std::vector<int32_t>> tokens;
    for (int s = 0; s < 5; ++s) {
      if (c.tokens[static_cast<size_t>(s)] == 0) continue;
      which.push_back(s);
      tokens.push_back(test::spread_ids(c.tokens[static_cast<size_t>(s)], 50 + s, vocab));
    }
    const std::vector<float> a = padded.step(which, tokens, c.last_only), b = plain.step(which, tokens, c.last_only);
    EXPECT_EQ(padded.model.graph_counts().padded, c.padded ? 1 : 0);
    EXPECT_EQ(plain.model.graph_counts().padded, 0);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_LT(test::rel_l2(a.data(), b.data(), b.size()), 1e-5);
    // The same K/V where the real tokens stored theirs (to the rounding of a matmul of more rows), zeros
    // elsewhere: a padded token's K/V stored anywhere, or a real token's in the wrong slot, differs by far more.
    const std::vector<float> kv_a = kv_values(padded), kv_b = kv_values(plain);
    size_t off = 0, stored = 0;
    for (size_t i = 0; i < kv_a.size(); ++i) {
      off += std::abs(kv_a[i] - kv_b[i]) > 1e-5f * (1.0f + std::abs(kv_b[i])) ? 1 : 0;
      stored += kv_b[i] != 0.0f ? 1 : 0;
    }
    EXPECT_EQ(off, 0u) << "of " << stored << " values the steps stored";
    EXPECT_GT(stored, 0u);
    // The next step reads what the padded step stored.
    std::vector<std::vector<int32_t>> next;
    for (int s : which) next.push_back(test::spread_ids(1, 90 + s, vocab));
    const std::vector<float> next_a = padded.step(which, next), next_b = plain.step(which, next);
    EXPECT_LT(test::rel_l2(next_a.data(), next_b.data(), next_b.size()), 1e-5);
  }
}

}  // namespace
}  // namespace tide
