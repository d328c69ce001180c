// Paged KV cache set-up shared by the decode and prefill sections: the arena sized from the model's layer
// groups for a number of sequences, and block tables filled for a context without running the model
// (KvCacheManager::append + commit with dummy tokens, so sliding groups release out-of-window blocks exactly
// as in real use). Dummy tokens only feed the block keys; prefix caching is off.
#pragma once

#include <cstdint>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "model/config.h"
#include "core/forward_batch.h"

namespace tide::bench {

// The KV arena holding `num_seqs` sequences of up to `num_tokens` positions each, computed in steps of at most
// `chunk` tokens: per sequence, what KvCacheManager::max_arena_blocks says (global groups: every block;
// sliding: the window plus a chunk).
KvArenaSpec arena_spec(const ModelConfig& config, int64_t block_size, int64_t num_seqs, int64_t num_tokens,
                       int64_t chunk);
// Device bytes of that arena: its blocks times kv_block_bytes (backend.h) of a bf16 or an fp8 cache.
int64_t kv_cache_bytes(const ModelConfig& config, int64_t block_size, const KvArenaSpec& arena, bool fp8 = false);

// A dummy token id for position `pos` of sequence `seq_idx`, inside the vocabulary.
int32_t dummy_token(const ModelConfig& config, int64_t seq_idx, int64_t pos);
// Gives `seq` blocks for positions [n, n + num_tokens) and commits them in steps of at most `chunk` tokens.
void fake_prefill(const ModelConfig& config, KvCacheManager& manager, SequenceKv& seq, int64_t seq_idx,
                  int64_t num_tokens, int64_t chunk);
// The ForwardSequence of `num_tokens` new tokens of `seq` (appended, not yet committed).
ForwardSequence forward_sequence(const SequenceKv& seq, int64_t num_tokens);

}  // namespace tide::bench
