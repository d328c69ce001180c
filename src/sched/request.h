// Request: one generation request as the scheduler sees it: its tokens (the prompt, then the ids sampled so
// far), its KV state, where it is in its life (waiting, running, preempted, finished) and why it finished.
// Sampling parameters, detokenization and streaming are the engine's, keyed by RequestId; the scheduler only
// needs what decides how many tokens to compute and when a request ends.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kv/kv_cache_manager.h"

namespace tide {

// Given by the scheduler in arrival order, so a smaller id arrived earlier (FCFS compares ids).
using RequestId = uint64_t;

enum class RequestStatus : uint8_t {
  kWaiting,    // not admitted yet; holds no blocks
  kRunning,    // admitted: holds blocks, gets tokens computed each step it is scheduled
  kPreempted,  // was running, gave its blocks back; waits (ahead of later arrivals) to be recomputed
  kFinished,
};

enum class FinishReason : uint8_t {
  kNone,    // not finished
  kStop,    // sampled one of its stop ids
  kLength,  // generated max_tokens
  kAbort,   // cancelled by the caller
  kError,   // could not make progress (the message says why)
};

// "stop", "length", "abort", "error" (the OpenAI spelling where there is one); "" for kNone.
const char* to_string(FinishReason reason);
const char* to_string(RequestStatus status);

// Logits of prompt positions a request asks for besides its generated ids (Engine::prompt_logits).
enum class PromptLogits : uint8_t {
  kNone,
  kLast,  // the last prompt position's
  kAll,   // every prompt position's: no prefix is reused, every position is computed
};

struct RequestParams {
  std::vector<int32_t> prompt;    // token ids; not empty
  int64_t max_tokens = 16;        // ids to generate at most; 0 finishes at once with "length"
  int64_t min_tokens = 0;         // stop ids do not end generation before this many ids
  std::vector<int32_t> stop_ids;  // a sampled id among these ends generation; it stays in the output
  // An earlier request with the same prompt (another sample of it): this one is admitted only once that one
  // has computed its prompt, so it reuses the prompt's blocks from the prefix cache instead of computing them
  // again. 0: none.
  uint64_t prompt_leader = 0;
  // With max_tokens 0 the request computes its prompt (for these logits) and finishes with "length".
  PromptLogits prompt_logits = PromptLogits::kNone;
};

struct Request {
  RequestId id = 0;
  RequestParams params;
  RequestStatus status = RequestStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;                // why, when finish_reason is kError
  std::vector<int32_t> token_ids;   // the prompt, then the generated ids
  SequenceKv kv;                    // K/V of token_ids[0 .. num_computed_tokens()) are in the cache
  int64_t num_cached_tokens = 0;    // prompt tokens reused from the prefix cache at the first admission
  int64_t num_preemptions = 0;
  // A finish asked for while the request was part of a step in flight; applied by Scheduler::update.
  FinishReason pending_finish = FinishReason::kNone;
  // Prompt positions below this had their logits in a step already (PromptLogits; a recompute after a
  // preemption does not ask for them again).
  int64_t prompt_logits_done = 0;
  // Drafted tokens of the step in flight (speculative decoding): computed after the newest id at positions
  // num_tokens() .., each checked against the id sampled before it. Not in token_ids until accepted.
  std::vector<int32_t> draft;

  Request(RequestId request_id, RequestParams request_params);

  int64_t num_prompt_tokens() const { return static_cast<int64_t>(params.prompt.size()); }
  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens(); }
  std::span<const int32_t> output_ids() const {
    return std::span<const int32_t>(token_ids).subspan(static_cast<size_t>(num_prompt_tokens()));
  }
  int64_t num_computed_tokens() const { return kv.num_computed(); }
  // Token `pos` of the sequence, drafted tokens after token_ids.
  int32_t token_at(int64_t pos) const {
    return pos < num_tokens() ? token_ids[static_cast<size_t>(pos)] : draft[static_cast<size_t>(pos - num_tokens())];
  }
  // Tokens to compute before the next id can be sampled: the prompt after the reused prefix, the last
  // sampled id when decoding, or prompt + generated after a preemption (recompute). Always >= 1 unless
  // finished: the newest id is never in the cache.
  int64_t num_tokens_to_compute() const { return num_tokens() - num_computed_tokens(); }
  // Running with only the newest sampled id left to compute (one token per step).
  bool is_decoding() const { return num_output_tokens() > 0 && num_tokens_to_compute() == 1; }
  bool is_finished() const { return status == RequestStatus::kFinished; }
};

}  // namespace tide
