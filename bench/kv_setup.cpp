#include "bench/kv_setup.h"

#include <climits>

#include "backend/backend.h"
#include "core/error.h"

namespace tide::bench {

KvArenaSpec arena_spec(const ModelConfig& config, int64_t block_size, int64_t num_seqs, int64_t num_tokens,
                       int64_t chunk) {
  const KvCacheManager sizing(block_size, config.group_windows(), KvArenaSpec{}, /*enable_prefix_caching=*/false);
  const int64_t blocks = num_seqs * sizing.max_arena_blocks(num_tokens, chunk);
  if (blocks > INT32_MAX) fail("a KV arena of {} blocks is too large", blocks);
  return KvArenaSpec{static_cast<int32_t>(blocks), 0};
}

int64_t kv_cache_bytes(const ModelConfig& config, int64_t block_size, const KvArenaSpec& arena, bool fp8) {
  return int64_t{arena.num_blocks} * kv_block_bytes(fp8 ? DType::kF8E4M3 : DType::kBF16, config.layers_per_kv_block,
                                                     block_size, config.num_heads_kv, config.head_dim);
}

int32_t dummy_token(const ModelConfig& config, int64_t seq_idx, int64_t pos) {
  return static_cast<int32_t>((pos * 7919 + seq_idx * 104729 + 17) % config.vocab_size);
}

void fake_prefill(const ModelConfig& config, KvCacheManager& manager, SequenceKv& seq, int64_t seq_idx,
                  int64_t num_tokens, int64_t chunk) {
  std::vector<int32_t> tokens;
  for (int64_t done = 0; done < num_tokens;) {
    const int64_t n = std::min(chunk, num_tokens - done);
    const int64_t start = seq.num_computed();
    tokens.clear();
    for (int64_t i = 0; i < n; ++i) tokens.push_back(dummy_token(config, seq_idx, start + i));
    manager.append(seq, n);
    manager.commit(seq, tokens);
    done += n;
  }
}

ForwardSequence forward_sequence(const SequenceKv& seq, int64_t num_tokens) {
  ForwardSequence fs{seq.num_computed(), num_tokens, {}};
  for (const std::vector<int32_t>& table : seq.block_tables) fs.block_tables.emplace_back(table);
  return fs;
}

}  // namespace tide::bench
