// ForwardBatch: one step's work for the model, built by the scheduler (sched/) or the engine and read by
// Cohere2Model::forward. Sequences may mix prefill chunks and single decode tokens; each brings its block
// table per layer group. Plain data over kv's vocabulary (block ids), so it lives in core/: the scheduler
// that builds it and the model that reads it both depend on it, not on each other.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tide {

struct ForwardSequence {
  int64_t start_pos = 0;   // position of the first new token = positions already in the KV cache
  int64_t num_tokens = 0;  // new tokens of this sequence in the batch
  // One table per layer group, indexed by position / block_size. Entries must be real blocks for every
  // position the group's attention reads or writes: [max(0, start_pos - window + 1), start_pos + num_tokens)
  // (from 0 for a global group); other entries may be kNullBlock.
  std::vector<std::span<const int32_t>> block_tables;
};

struct ForwardBatch {
  std::vector<int32_t> token_ids;        // [T]: the sequences' new tokens, concatenated in order
  std::vector<ForwardSequence> seqs;     // [S]
  std::vector<int32_t> logit_indices;    // indices into token_ids whose logits are computed, in output order
};

}  // namespace tide
