// Engine: the front door of tide's runtime. It loads a model onto a backend (ModelExecutor), its tokenizer and
// the paged KV cache, checks requests, and drives a step loop on its own thread (engine_loop.cpp): submit()
// (thread-safe) queues a request and returns its RequestHandle; the loop batches every live request with
// continuous batching (sched/Scheduler: decode tokens and prefill chunks of different requests share each
// forward step, preemption by recompute when the arena runs out), runs each step on the executor, and the
// OutputProcessor samples' state turns the results into SampleDeltas for the handles. generate_batch(),
// generate() and prompt_logits() submit and wait.
#pragma once

#include <cstdint>
#include <filesystem>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kv/kv_cache_manager.h"
#include "model/cohere2.h"
#include "runtime/generation.h"
#include "runtime/model_executor.h"
#include "runtime/sampling.h"
#include "spec/speculative_config.h"
#include "tokenizer/tokenizer.h"

namespace tide {

struct EngineOptions {
  int64_t block_size = 16;                       // positions per KV block
  // Bytes of the device KV arena (every layer group's blocks); 0: automatic (on a GPU,
  // gpu_memory_utilization of its memory minus what is in use after loading the weights and the activations
  // of the largest step; on the CPU 256 MiB).
  int64_t kv_cache_memory = 0;
  double gpu_memory_utilization = 0.9;
  int64_t host_kv_cache_memory = 0;              // bytes of the host tier (0: no host tier)
  bool enable_prefix_caching = true;
  // Prompt tokens of one sequence per forward step and tokens of one step, all sequences together; 0:
  // automatic, sized for the device (a GPU: 8192 and 8192, so that a long prompt prefills in large chunks;
  // the CPU: 512 and 2048).
  int64_t max_prefill_chunk = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t max_num_seqs = 256;                    // requests running at once
  bool enforce_eager = false;                    // never replay recorded graphs of decode steps
  int64_t max_model_len = 0;                     // longest prompt + max_tokens; 0: the model's maximum
  Quantization quantization = Quantization::kNone;  // kFp8: a bf16 checkpoint's linear layers to FP8 at load
  LoadFormat load_format = LoadFormat::kAuto;        // kDummy: random weights from config.json alone
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto; // kAuto: the activation dtype; kFp8: E4M3 (KvStorage)
  // Called while the weights load with the checkpoint bytes uploaded so far and in all.
  std::function<void(int64_t done, int64_t total)> load_progress;
  // Speculative decoding (docs/design/speculative-decoding.md): prompt lookup ("ngram") or a draft model
  // drafts up to num_speculative_tokens tokens per decoding request and step, verified in the same forward
  // pass; outputs are the same as without it. Unset: off. A draft model loads with the same quantization and
  // load format as the model; its KV blocks are the model's arena's when their bytes fit (draft_arena_layout),
  // else its KV cache takes a share of kv_cache_memory (in proportion to its bytes per position beside the
  // model's).
  std::optional<spec::SpeculativeConfig> speculative;
};

// What the engine has done since it started, and what it holds now (for metrics and logs).
struct EngineStats {
  int64_t num_running = 0;          // samples being computed (holding KV blocks)
  int64_t num_waiting = 0;          // samples waiting to be admitted (new or preempted)
  int64_t num_preemptions = 0;      // total
  int64_t num_steps = 0;            // forward steps run
  int64_t prompt_tokens = 0;        // prompt tokens computed (a reused prefix is not computed; recomputes are)
  int64_t generation_tokens = 0;    // tokens sampled
  int64_t num_requests_finished = 0;
  // Speculative decoding: drafted tokens verified, those accepted, and verifications (one per request and
  // verify step); the mean accepted length per verification is accepted / verifies.
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  int64_t spec_verifies = 0;
  int64_t spec_draft_steps = 0;  // steps of the draft model (a draft model's speculation)
  // A draft model's cache in the model's arena: its sequences whose blocks went back to the model's requests
  // when the arena was short (each computes its draft cache again when it next drafts).
  int64_t spec_draft_reclaims = 0;
  // Per draft position (0: a verify step's first drafted token): drafts verified there, and those accepted;
  // their ratio is the acceptance rate at that depth, what choosing num_speculative_tokens wants to know.
  std::vector<int64_t> spec_draft_tokens_per_position;
  std::vector<int64_t> spec_accepted_tokens_per_position;
  // Where the loop's time went, summed over the steps run: the steps' wall time, and in it planning them
  // (the scheduler, block copies queued), running them (queueing the forward pass and sampling, waiting for
  // the sampled ids) and their results (committing, detokenizing, stop strings, building and handing out
  // deltas; mostly while the next step runs on the device, so the three parts add up to more than the wall
  // time).
  double step_seconds = 0;
  double schedule_seconds = 0;
  double execute_seconds = 0;
  double output_seconds = 0;
  double draft_seconds = 0;  // running the draft model before the steps (its own part of the wall time)
  // The model's forward passes (the draft model's with speculation by one): replayed from recorded CUDA
  // graphs, recorded (after an eager run), and all of them; the rest ran eagerly (Cohere2Model::GraphCounts).
  int64_t graph_replays = 0, graphs_recorded = 0, forward_passes = 0;
  int64_t draft_graph_replays = 0, draft_graphs_recorded = 0, draft_forward_passes = 0;
};

// One request of Engine::generate_batch.
struct BatchRequest {
  std::vector<int32_t> prompt;  // token ids
  GenerateOptions options;      // stop ids: options.stop_token_ids, and the engine's unless ignore_eos
};

// Called with (index of the request in generate_batch's span, new token id of its sample 0) as tokens are
// produced, in the calling thread.
using BatchTokenCallback = std::function<void(size_t, int32_t)>;

// One layer group's share of the KV arena.
struct KvGroupReport {
  int64_t window = 0;  // 0: global
  int num_layers = 0;
  GroupStats stats;
};

// The KV arena and each layer group's share of it.
struct KvReport {
  int64_t block_size = 0;
  int64_t block_bytes = 0;  // device bytes of one block (every group's)
  ArenaStats arena;
  std::vector<KvGroupReport> groups;
};

// `options` with the automatic values (0) resolved for `model`'s backend: the step sizes, the KV budget (the
// bytes left beside the weights and the largest step), max_model_len (the model's maximum length). Throws
// tide::Error naming the option (its field name: max_model_len) when a value is out of range, or when
// `model`'s backend has no FP8 KV cache for its head_dim and kv_cache_dtype asks for one.
EngineOptions resolve_engine_options(EngineOptions options, const Cohere2Model& model);
// The KV arena (device blocks and host-tier slots, every group's block of one size) that `options`' byte
// budgets buy for `model`; with a `draft` model that has blocks of its own (no draft_arena_layout), the
// model's share of kv_cache_memory (the rest is the draft's: plan_draft_kv_arena). Throws tide::Error naming
// the option when a budget is invalid or buys no block.
KvArenaSpec plan_kv_arena(const Cohere2Model& model, const EngineOptions& options, const Cohere2Model* draft = nullptr);
// A draft model's blocks of its own (no host tier; when it has no draft_arena_layout): its share of
// kv_cache_memory, in proportion to its KV bytes per position beside `model`'s. Throws tide::Error when that
// buys no block.
KvArenaSpec plan_draft_kv_arena(const Cohere2Model& model, const EngineOptions& options, const Cohere2Model& draft);
// The draft's KV dtype: the engine's kv_cache_dtype where the backend has it for the draft's head_dim, else
// the activation dtype.
KvCacheDtype draft_kv_cache_dtype(const EngineOptions& options, const Cohere2Model& draft);

// How a draft model's KV blocks lie in the model's arena: each of its blocks is one arena block holding
// `block_size` positions (the model's times a power of two) of `num_layers` layer slots (its groups use the
// first layers_per_kv_block of them). The same bytes as the model's block: num_layers x block_size x its
// kv heads = the model's layers_per_kv_block x block_size x kv heads, at the same head_dim and KV dtype.
struct DraftArenaLayout {
  int64_t block_size = 0;
  int64_t num_layers = 0;
};
// The layout with the fewest unused layer slots (block sizes up to 256 positions), or nullopt when the draft's
// blocks cannot be the arena's (another head_dim or KV dtype, or more KV per position-block than the model's
// block holds): then the draft gets its own blocks (plan_draft_kv_arena).
std::optional<DraftArenaLayout> draft_arena_layout(const Cohere2Model& model, const EngineOptions& options,
                                                   const Cohere2Model& draft);

class Engine {
 public:
  // Loads DIR (config.json, safetensors, tokenizer.json) onto `backend` and starts the step loop's thread.
  // Throws tide::Error.
  Engine(const std::filesystem::path& model_dir, std::unique_ptr<Backend> backend, EngineOptions options = {});
  // Stops the loop: unfinished requests end with "abort" (their handles get the final deltas).
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const ModelConfig& config() const { return executor_.model().config(); }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const Cohere2Model& model() const { return executor_.model(); }
  const EngineOptions& options() const { return options_; }
  // The KV cache; read it only while no request is live (the loop thread changes it).
  const KvCacheManager& kv_cache() const { return kv_manager_; }
  // The draft model's KV cache (speculative decoding with a draft model), or null; read it only while no
  // request is live.
  const KvCacheManager* draft_kv_cache() const { return draft_kv_manager_ ? &*draft_kv_manager_ : nullptr; }
  // The arena's and each group's statistics, consistent (taken between steps); callable any time.
  KvReport kv_report() const;
  // Counters and queue sizes, consistent (taken between steps); callable any time.
  EngineStats stats() const;
  // The longest prompt + max_tokens a request may ask for (options' max_model_len, at most the model's maximum).
  int64_t max_model_len() const { return options_.max_model_len; }
  // Token ids that end generation: generation_config.json's, config.json's and the tokenizer's EOS.
  const std::vector<int32_t>& stop_token_ids() const { return stop_ids_; }

  // Queues a request for the step loop and returns at once; thread-safe. Its deltas go to `on_delta` (called
  // on the loop thread) when given, else they queue in the handle. Throws tide::Error, queueing nothing, when
  // the request is invalid (empty prompt, ids outside the vocabulary, a parameter out of range) or can never
  // run (prompt + max_tokens beyond the model's maximum length, or more KV blocks than the arena holds even
  // when nothing else runs). Anything else is admitted when there is room: no request fails for lack of KV
  // memory.
  std::shared_ptr<RequestHandle> submit(std::vector<int32_t> prompt, GenerateOptions options,
                                        DeltaCallback on_delta = {});

  // Generates up to max_tokens after `prompt`: generate_batch() with one request. `on_token`, when set, is
  // called with each new token of sample 0. Throws tide::Error for an invalid request, one that can never
  // fit, or one that finished with an error.
  GenerateResult generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                          const std::function<void(int32_t)>& on_token = {});

  // Submits every request (all checked first: one invalid request refuses the batch, naming its index) and
  // waits for all of them; they run together with continuous batching, each with its own sampling stream, so
  // a request's ids do not depend on the rest of the batch. Returns one result per request, in order. When
  // `on_token` (called in this thread) throws, the batch is cancelled, and the exception propagates once every
  // request has ended.
  std::vector<GenerateResult> generate_batch(std::span<const BatchRequest> requests,
                                             const BatchTokenCallback& on_token = {});

  // Logits [positions][vocab] of `prompt`: every position, or only the last one. A request of the step loop
  // like any other (scheduled, chunked and batched with the live ones); with all_positions nothing is taken
  // from the prefix cache. Throws tide::Error for a prompt that can never run or when the request fails.
  std::vector<std::vector<float>> prompt_logits(std::span<const int32_t> prompt, bool all_positions);

 private:
  struct Submission;
  struct Inbox;
  class Loop;

  void start_loop();
  // submit() of several requests, already checked, under one lock of the inbox: the loop takes them in the
  // same step, so a batch's requests start together whatever the threads' timing (generate_batch).
  struct NewRequest {
    std::vector<int32_t> prompt;
    GenerateOptions options;
    DeltaCallback on_delta;
    PromptLogits prompt_logits = PromptLogits::kNone;
  };
  std::vector<std::shared_ptr<RequestHandle>> submit_together(std::vector<NewRequest> requests);
  // The KV cache managers over a new arena of the size the options bought (empty: no block in use, nothing
  // cached): the model's, and the draft model's when it shares the arena (draft_layout_). The draft's
  // manager is assigned in place, so references to it stay valid.
  void reset_kv_cache();
  void check_prompt(std::span<const int32_t> prompt, int64_t max_new_tokens) const;
  void check_request(std::span<const int32_t> prompt, const GenerateOptions& options) const;
  void check_token_id(int32_t id, const char* what) const;

  ModelExecutor executor_;  // the backend, the model, the KV arena's memory
  Tokenizer tokenizer_;
  EngineOptions options_;
  std::optional<DraftArenaLayout> draft_layout_;  // set when the draft model's blocks are the arena's
  KvArenaSpec arena_;
  KvCacheManager kv_manager_;
  std::optional<KvCacheManager> draft_kv_manager_;  // the draft model's blocks
  std::vector<int32_t> stop_ids_;

  EngineStats stats_;  // the loop's counters, under step_mutex_
  // Held by the loop for each step and by kv_report / stats: one user of the model and cache at once.
  mutable std::mutex step_mutex_;
  std::shared_ptr<Inbox> inbox_;  // submissions and cancels for the loop; handles keep it alive
  struct LoopDeleter {  // defined beside Loop (engine_loop.cpp), so this header needs no complete Loop
    void operator()(Loop* loop) const;
  };
  std::unique_ptr<Loop, LoopDeleter> loop_;  // state of the loop thread (the scheduler, live samples)
  std::thread thread_;
};

}  // namespace tide
