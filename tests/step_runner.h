// A model on its own backend with its own KV cache, stepped by hand: each step brings some new tokens for some
// of its sequences and returns the logits the forward pass gives (f32, on the host). Shared by the tests of
// graph-replayed and padded steps (e2e/padded_step_test.cpp, gpu/cuda_graph_test.cpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"
#include "kv/kv_cache_manager.h"
#include "model/cohere2.h"
#include "test_util.h"

namespace tide::test {

struct StepRunner {
  static constexpr int64_t kBlockSize = 16;
  static constexpr int32_t kBlocks = 1024;

  StepRunner(std::unique_ptr<Backend> backend_, const std::string& fixture_name, bool graphs, size_t num_seqs,
             const WeightLoadOptions& options = {})
      : backend(std::move(backend_)),
        model(Cohere2Model::load(fixture(fixture_name), *backend, options)),
        manager(kBlockSize, model.config().group_windows(), KvArenaSpec{kBlocks, 0}, /*enable_prefix_caching=*/false),
        kv(model.allocate_kv(kBlockSize, kBlocks)),
        seqs(num_seqs) {
    model.set_graphs_enabled(graphs);
  }

  // `tokens[i]` new tokens for sequence `which[i]`; the logits of every new token, or of each sequence's last
  // one with `last_only`.
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
    const std::vector<float> out = download_f32(model.forward(batch, kv));
    for (size_t i = 0; i < which.size(); ++i) manager.commit(seqs[static_cast<size_t>(which[i])], tokens[i]);
    return out;
  }

  // A tensor of this backend as f32 values on the host.
  std::vector<float> download_f32(const Tensor& t) {
    std::vector<unsigned char> raw(t.nbytes());
    backend->download(t, raw.data());
    std::vector<float> out(static_cast<size_t>(t.numel()));
    convert_to_f32(raw.data(), t.dtype, out.data(), out.size());
    return out;
  }

  std::unique_ptr<Backend> backend;
  Cohere2Model model;
  KvCacheManager manager;
  std::vector<KvStorage> kv;
  std::vector<SequenceKv> seqs;
};

// `n` token ids below `vocab`, spread by `seed`.
inline std::vector<int32_t> spread_ids(int64_t n, int32_t seed, int32_t vocab) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(static_cast<int32_t>((seed * 7919 + i * 104729) % vocab));
  return v;
}

}  // namespace tide::test
