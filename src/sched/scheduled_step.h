// ScheduledStep: one step's plan as the scheduler hands it to the engine loop: which requests compute which
// tokens, the block copies to run first, the ForwardBatch for the model and which logits rows to sample for
// which request. Plain data; the batch's block tables are views into the requests' SequenceKv tables and
// stay valid until Scheduler::update(step, ...) (nothing mutates them in between).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/forward_batch.h"
#include "core/kv_block.h"
#include "sched/request.h"

namespace tide {

struct ScheduledSequence {
  RequestId request_id = 0;
  int64_t start_pos = 0;   // the request's num_computed_tokens() when scheduled
  int64_t num_tokens = 0;  // tokens computed this step: token_ids[start_pos, start_pos + num_tokens)
  bool samples = false;    // computes the request's newest token, so its logits pick the next id
  // Drafted tokens computed after the newest (a verify step: Request::draft): the last 1 + num_draft positions
  // are all sampled, row i checking draft token i.
  int64_t num_draft = 0;
  int64_t num_prompt_tokens = 0;  // the request's prompt length (tokens before it are prompt, after it output)
};

// A prompt position whose logits a request asked for (PromptLogits), computed in this step.
struct PromptLogitsRow {
  RequestId request_id = 0;
  int64_t position = 0;
};

struct ScheduledStep {
  int64_t step_id = 0;
  std::vector<ScheduledSequence> seqs;         // [S], in batch order: decodes first, then prefill chunks
  std::vector<BlockCopy> copies;               // run, in order, before the forward (even if S = 0)
  // Token ids, positions, block tables, logit rows: the rows to sample first, then the prompt rows.
  ForwardBatch batch;
  std::vector<RequestId> sample_ids;           // [rows to sample]: whose next id each row picks (a verify
                                               // step's rows of one request are consecutive)
  std::vector<PromptLogitsRow> prompt_rows;    // [rows after those]: prompt positions' logits asked for

  bool empty() const { return seqs.empty(); }
  int64_t num_tokens() const { return static_cast<int64_t>(batch.token_ids.size()); }
};

// Fills step.batch, step.sample_ids and step.prompt_rows from step.seqs; requests[i] is the request of
// step.seqs[i] (already appended: its tables cover the scheduled tokens). Rows to sample are the last token
// of each sequence whose `samples` is set (the last 1 + num_draft with drafted tokens), in sequence order; a
// prefill chunk that does not finish its tokens samples nothing. Then, in sequence and position order, the
// prompt positions whose logits are asked for and not yet given.
void build_forward_batch(ScheduledStep& step, std::span<const Request* const> requests);

}  // namespace tide
