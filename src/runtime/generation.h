// What a generation request asks for (GenerateOptions) and what comes back: SampleDelta, the new output of one
// sample since its previous delta, streamed while the engine runs; SampleResult / GenerateResult, the whole
// output once finished; RequestHandle, the caller's side of a submitted request (its deltas, cancel).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/constraint.h"
#include "runtime/sampling.h"
#include "sched/request.h"

namespace tide {

inline constexpr int kMaxSamplesPerRequest = 128;  // n

// A bounded span of the output: a reasoning model's thinking block, from `open_id` to `close_id`. Once the span
// holds `max_tokens` tokens, `close_id` is the next token, whatever the model's distribution (its logprob is
// still reported as the model's). A prompt that ends inside the span (the template opened it) starts counting
// at the first generated token.
struct SpanBudget {
  int32_t open_id = -1;
  int32_t close_id = -1;
  int64_t max_tokens = 0;
};

struct GenerateOptions {
  int64_t max_tokens = 16;
  // Stop ids (the engine's EOS unless ignore_eos, and stop_token_ids) cannot be sampled before this many
  // tokens (their logits are -inf), and stop strings do not end generation before it.
  int64_t min_tokens = 0;
  SamplingParams sampling;                // temperature, top-k/p, min-p, penalties, logit_bias, seed
  bool ignore_eos = false;                // the engine's stop_token_ids() do not end generation
  // More ids that end generation (also with ignore_eos). A stop id stays in ids; its text (where special tokens
  // are spelled out) is left out unless include_stop_str_in_output.
  std::vector<int32_t> stop_token_ids;
  // Strings that end generation when they appear in the generated text (also across token boundaries); the
  // text ends before the match (include_stop_str_in_output: after it); ids keep every generated token.
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;  // special tokens add no text
  // -1: none; 0: the log-probability of each generated token; k (<= 20): also the k most likely tokens at each
  // step. Log-probabilities of the model's distribution (log_softmax of its logits, before logit_bias,
  // penalties, temperature and the filters).
  int logprobs = -1;
  // Independent samples of the same prompt (1 .. kMaxSamplesPerRequest). Sample i draws from the stream
  // seed + i (with a seed: reproducible); samples after the first wait for the first to compute the prompt and
  // reuse its blocks (prefix caching), so the prompt is computed once.
  int n = 1;
  // The thinking budget: none when unset.
  std::optional<SpanBudget> thinking_budget;
  // Structured outputs: each token is drawn among those the constraint allows (a mask in the sample op), and a
  // stop id only where the output may end. Null: unconstrained.
  std::shared_ptr<const TokenConstraintSpec> constraint;
  // Names the request in the engine's log (the server passes its response id); empty: the engine's number.
  std::string request_id;
  // Speculative decoding for this request where the engine has it (EngineOptions::speculative): false turns
  // it off. The output is the same either way.
  bool speculative = true;
};

struct TokenLogprobs {
  int32_t id = 0;                              // the generated token
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // the `logprobs` most likely tokens, most likely first
};

// New output of one sample since its previous delta. The last delta of a sample has finish_reason set.
struct SampleDelta {
  int index = 0;                      // which of the request's n samples
  std::vector<int32_t> ids;           // new token ids
  std::string text;                   // new text (stop strings left out; held back while it may begin one)
  std::vector<TokenLogprobs> logprobs;  // one per id of `ids` when logprobs >= 0
  // Engine::prompt_logits only: the logits [vocab] of the prompt positions computed since the last delta.
  std::vector<std::vector<float>> prompt_logits;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;                  // why, when finish_reason is kError
  // Set on the last delta:
  int64_t num_output_tokens = 0;
  int64_t cached_tokens = 0;          // prompt tokens this sample took from the prefix cache
  int64_t num_preemptions = 0;
  bool stopped_by_string = false;     // finish_reason is stop because a stop string appeared

  bool finished() const { return finish_reason != FinishReason::kNone; }
};

struct SampleResult {
  std::vector<int32_t> ids;     // generated tokens (the stop token included when generation hit one)
  std::string text;             // their text, stop strings left out
  std::vector<TokenLogprobs> logprobs;
  std::string finish_reason;    // "stop" (stop id or string), "length", "abort" (cancelled) or "error"
  std::string error;            // why, when finish_reason is "error"
  int64_t cached_tokens = 0;    // prompt tokens taken from the prefix cache instead of computed
  int64_t num_preemptions = 0;  // times the sample gave its blocks back and was recomputed

  // Adds `delta` (a delta of this sample).
  void add(const SampleDelta& delta);
};

// The result of one request: sample 0 directly (the common n = 1 case), all n samples in `samples`.
struct GenerateResult : SampleResult {
  std::vector<SampleResult> samples;  // index order; samples[0] equals the base
};

// Called on the engine's thread with each delta of a request, in order per sample. Must not block for long (it
// holds up every request) and should not throw (a throw cancels the request).
using DeltaCallback = std::function<void(SampleDelta&&)>;

// The caller's side of a submitted request. Deltas queue here unless the request was submitted with a
// callback. Thread-safe.
class RequestHandle {
 public:
  RequestHandle(uint64_t id, int num_samples, std::function<void(uint64_t)> cancel, DeltaCallback callback);

  uint64_t id() const { return id_; }
  int num_samples() const { return num_samples_; }
  // Asks the engine to end every unfinished sample ("abort"); returns at once. The ends arrive as deltas.
  void cancel();
  // The next delta, waiting for it; nullopt once every sample has finished and every delta was taken.
  std::optional<SampleDelta> next();
  // As next(), waiting at most `timeout`; nullopt also on timeout (done() tells which).
  std::optional<SampleDelta> next_for(std::chrono::milliseconds timeout);
  // Every sample has finished and every queued delta was taken.
  bool done() const;

  // --- the engine's side ---
  void deliver(SampleDelta&& delta);

 private:
  const uint64_t id_;
  const int num_samples_;
  const std::function<void(uint64_t)> cancel_;
  const DeltaCallback callback_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<SampleDelta> queue_;
  int num_finished_ = 0;
  bool cancel_asked_ = false;
};

}  // namespace tide
