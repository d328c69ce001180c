// One step's metadata: the host arrays a ForwardBatch turns into (token ids, logit rows, positions, sequence
// starts, each group's block tables and KV slots), the padding of a step for a recorded graph, and their copy
// in backend memory that the forward pass reads (one packed upload per step). Used by Cohere2Model
// (cohere2.cpp); internal to the model library.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/forward_batch.h"
#include "model/config.h"

namespace tide {

// One step's metadata on the host: what upload_metadata() uploads.
struct HostMetadata {
  std::vector<int32_t> token_ids;                 // [T]
  std::vector<int32_t> logit_rows;                // [R]
  std::vector<int32_t> positions;                 // [T]
  std::vector<int32_t> seq_starts{0};             // [S + 1]
  std::vector<std::vector<int32_t>> tables;       // per group: [S, table_width]
  std::vector<std::vector<int64_t>> slots;        // per group: [T]
  int64_t table_width = 1;
  int64_t max_position = 0;
  int64_t max_seq_tokens = 0;
};

// Checks `batch` and lays out its metadata. `table_width` 0: the longest table in the batch.
HostMetadata host_metadata(const ForwardBatch& batch, const ModelConfig& config, int64_t block_size,
                           int64_t table_width);

// Pads a batch whose sequences bring 1 .. per_seq tokens each to `num_seqs` sequences of per_seq tokens. A
// sequence's added tokens come before its own, at the positions just before them (which the sequence has
// computed: the caller checks that start_pos >= per_seq - num_tokens): token 0, slot -1, so they store nothing
// (the K/V there stay the sequence's), no real row sees them, and their own rows, never read, attend only keys
// the sequence stored. The attention kernels take a sequence's keys up to its last token's position, so an
// added token after the real ones would make them read slots nothing has written yet. The added sequences are
// token 0 at positions 0, 1, ..., a null block table and slot -1 (nothing stored, nothing read).
// `every_token` (a uniform batch whose every token is a logit row): every row gets logits. Otherwise the
// batch's logit rows come first, at their tokens' new places, then row 0 again up to num_seqs * per_seq rows,
// so that a graph's row count is fixed.
void pad_sequences(HostMetadata& m, int64_t per_seq, int64_t num_seqs, bool every_token);

// Whether `m`'s logit rows are 0, 1, ..., T - 1.
bool logits_of_every_token(const HostMetadata& m);

// Device copies of one step's metadata, shared by all layers of a group: views of one buffer.
struct StepMetadata {
  Tensor packed;                        // [bytes] u8: the arrays below at metadata_layout()'s offsets
  Tensor token_ids;                     // [T] i32
  Tensor logit_rows;                    // [R] i32
  std::vector<AttentionBatch> groups;   // one per layer group
  bool logits_of_every_token = false;   // logit_rows is 0, 1, ..., T - 1 (then not read)
};

// Uploads `m` into new tensors.
StepMetadata upload_metadata(const HostMetadata& m, Backend& b, int64_t block_size);
// Copies `m` (same sizes) into `meta`'s tensors without synchronizing: a graph's inputs between replays.
void update_metadata(const StepMetadata& meta, const HostMetadata& m, Backend& b);

}  // namespace tide
