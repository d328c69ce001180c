// Steps of few tokens per sequence run padded (Cohere2Model::forward's graph path: every sequence padded to the
// most tokens of one, the batch to a power of two of sequences, logit rows gathered at their new places). The
// CPU backend records no graphs, but the first such step of a model runs the padded layout eagerly before the
// recording is refused: each case here is that first step, against a model with graphs off (no padding), on
// the same prompts. The logits must match row for row and the KV cache must hold the same bytes (the padded
// tokens store nothing); the step after it, from that cache, must match too.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "kv/kv_cache_manager.h"
#include "model/cohere2.h"

namespace tide {
namespace {

constexpr int64_t kBlockSize = 16;
constexpr int32_t kBlocks = 256;

struct Runner {
  explicit Runner(bool graphs)
      : model(Cohere2Model::load(test::fixture("cohere2-tiny"), backend, WeightLoadOptions{})),
        manager(kBlockSize, model.config().group_windows(), KvArenaSpec{kBlocks, 0}, /*enable_prefix_caching=*/false),
        kv(model.allocate_kv(kBlockSize, kBlocks)),
        seqs(5) {
    model.set_graphs_enabled(graphs);
  }

  // `tokens[i]` new tokens for sequence `which[i]`; `last_only`: logits of each sequence's last token only,
  // else of every token.
  std::vector<float> step(const std::vector<int>& which, const std::vector<std::vector<int32_t>>& tokens,
                          bool last_only = false) {
    ForwardBatch batch;
    for (size_t i = 0; i < which.size(); ++i) {
      SequenceKv& seq = seqs[static_cast<size_t>(which[i])];
      const auto n = std::ssize(tokens[i]);
      const int64_t start = seq.num_computed();
      manager.append(seq, n);
      ForwardSequence fs{start, n, {}};
      for (const std::vector<int32_t>& table : seq.block_tables) fs.block_tables.emplace_back(table);
      batch.seqs.push_back(std::move(fs));
      for (size_t t = 0; t < tokens[i].size(); ++t) {
        if (!last_only || t + 1 == tokens[i].size()) batch.logit_indices.push_back(static_cast<int32_t>(batch.token_ids.size()));
        batch.token_ids.push_back(tokens[i][t]);
      }
    }
    const Tensor logits = model.forward(batch, kv);
    EXPECT_EQ(logits.dtype, DType::kF32);
    std::vector<float> out(static_cast<size_t>(logits.numel()));
    std::memcpy(out.data(), logits.data, out.size() * sizeof(float));
    for (size_t i = 0; i < which.size(); ++i) manager.commit(seqs[static_cast<size_t>(which[i])], tokens[i]);
    return out;
  }

  std::vector<float> kv_values() {
    const Tensor& data = kv.front().data;
    EXPECT_EQ(data.dtype, DType::kF32);
    std::vector<float> values(static_cast<size_t>(data.numel()));
    std::memcpy(values.data(), data.data, values.size() * sizeof(float));
    return values;
  }

  CpuBackend backend;
  Cohere2Model model;
  KvCacheManager manager;
  std::vector<KvStorage> kv;
  std::vector<SequenceKv> seqs;
};

// ||got - want|| / ||want||.
double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    norm += double{want[i]} * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

std::vector<int32_t> ids(int64_t n, int32_t seed, int32_t vocab) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<int32_t>((seed * 7919 + i * 104729) % vocab));
  return v;
}

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
    Runner padded(true), plain(false);
    const auto vocab = static_cast<int32_t>(padded.model.config().vocab_size);
    // Prompts longer than a padded step's 8 tokens (both run them op by op), one past the sliding window.
    const std::vector<int64_t> prompts = {30, 12, 90, 17};  // sequence 4 has none
    for (int s = 0; s < 4; ++s) {
      const auto prompt = ids(prompts[static_cast<size_t>(s)], s + 1, vocab);
      ASSERT_EQ(padded.step({s}, {prompt}, true), plain.step({s}, {prompt}, true));
    }
    std::vector<int> which;
    std::vector<std::vector<int32_t>> tokens;
    for (int s = 0; s < 5; ++s) {
      if (c.tokens[static_cast<size_t>(s)] == 0) continue;
      which.push_back(s);
      tokens.push_back(ids(c.tokens[static_cast<size_t>(s)], 50 + s, vocab));
    }
    const std::vector<float> a = padded.step(which, tokens, c.last_only), b = plain.step(which, tokens, c.last_only);
    EXPECT_EQ(padded.model.graph_counts().padded, c.padded ? 1 : 0);
    EXPECT_EQ(plain.model.graph_counts().padded, 0);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_LT(rel_err(a, b), 1e-5);
    // The same K/V where the real tokens stored theirs (to the rounding of a matmul of more rows), zeros
    // elsewhere: a padded token's K/V stored anywhere, or a real token's in the wrong slot, differs by far more.
    const std::vector<float> kv_a = padded.kv_values(), kv_b = plain.kv_values();
    size_t off = 0, stored = 0;
    for (size_t i = 0; i < kv_a.size(); ++i) {
      off += std::abs(kv_a[i] - kv_b[i]) > 1e-5f * (1.0f + std::abs(kv_b[i])) ? 1 : 0;
      stored += kv_b[i] != 0.0f ? 1 : 0;
    }
    EXPECT_EQ(off, 0u) << "of " << stored << " values the steps stored";
    EXPECT_GT(stored, 0u);
    // The next step reads what the padded step stored.
    std::vector<std::vector<int32_t>> next;
    for (int s : which) next.push_back(ids(1, 90 + s, vocab));
    EXPECT_LT(rel_err(padded.step(which, next), plain.step(which, next)), 1e-5);
  }
}

}  // namespace
}  // namespace tide
