// Engine: a loaded model, its tokenizer, a backend and the paged KV cache. generate_batch() runs many
// requests together with continuous batching (sched/Scheduler: decode tokens and prefill chunks of different
// requests share each forward step, preemption by recompute when the pools run out) in the calling thread;
// generate() is its one-request case. Next (issue 5): the step loop on its own thread, streaming, cancel.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kv/kv_cache_manager.h"
#include "model/cohere2.h"
#include "runtime/sampling.h"
#include "tokenizer/tokenizer.h"

namespace tide {

struct EngineOptions {
  int64_t block_size = 16;                       // positions per KV block
  // Bytes for all device KV pools together; 0: automatic (on a GPU, gpu_memory_utilization of its memory
  // minus what is in use after loading the weights and a reserve for activations; on the CPU 256 MiB).
  int64_t kv_cache_memory = 0;
  double gpu_memory_utilization = 0.9;
  int64_t host_kv_cache_memory = 0;              // bytes for all host-tier pools together (0: no host tier)
  bool enable_prefix_caching = true;
  int64_t max_prefill_chunk = 512;               // prompt tokens of one sequence per forward step
  int64_t max_num_batched_tokens = 2048;         // tokens of one step, all sequences together (generate_batch)
  int64_t max_num_seqs = 256;                    // requests running at once (generate_batch)
  bool enforce_eager = false;                    // never replay recorded graphs of decode steps
};

struct GenerateOptions {
  int64_t max_tokens = 16;
  SamplingParams sampling;
  bool ignore_eos = false;                // the engine's stop_token_ids() do not end generation
  std::vector<int32_t> stop_token_ids;    // more ids that end generation (also with ignore_eos); kept in ids
};

// One request of Engine::generate_batch.
struct BatchRequest {
  std::vector<int32_t> prompt;  // token ids
  GenerateOptions options;      // stop ids: options.stop_token_ids, and the engine's unless ignore_eos
};

struct GenerateResult {
  std::vector<int32_t> ids;     // generated tokens (the stop token included when generation hit one)
  std::string finish_reason;    // "stop" (a stop token), "length" (max_tokens) or "error" (see `error`)
  std::string error;            // why, when finish_reason is "error"
  int64_t cached_tokens = 0;    // prompt tokens taken from the prefix cache instead of computed
  int64_t num_preemptions = 0;  // times the request gave its blocks back and was recomputed
};

// Called with (index of the request in generate_batch's span, new token id) as each token is produced.
using BatchTokenCallback = std::function<void(size_t, int32_t)>;

// One KV pool's statistics with the layer group it serves.
struct KvPoolReport {
  int64_t window = 0;  // 0: global
  int num_layers = 0;
  PoolStats stats;
};

// `options` with an automatic KV budget (kv_cache_memory 0) replaced by bytes for `model`'s backend.
EngineOptions resolve_kv_budget(EngineOptions options, const Cohere2Model& model);
// The KV pools (one per layer group) that `options`' byte budgets buy for `model`. Throws tide::Error when
// a budget is invalid or leaves a pool without a block.
std::vector<PoolSpec> plan_kv_pools(const Cohere2Model& model, const EngineOptions& options);

class Engine {
 public:
  // Loads DIR (config.json, safetensors, tokenizer.json) onto `backend`. Throws tide::Error.
  Engine(const std::filesystem::path& model_dir, std::unique_ptr<Backend> backend, EngineOptions options = {});

  const ModelConfig& config() const { return model_.config(); }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const Cohere2Model& model() const { return model_; }
  const KvCacheManager& kv_cache() const { return kv_manager_; }
  std::vector<KvPoolReport> kv_report() const;
  // Token ids that end generation: generation_config.json's, config.json's and the tokenizer's EOS.
  const std::vector<int32_t>& stop_token_ids() const { return stop_ids_; }

  // Generates up to max_tokens after `prompt`: generate_batch() with one request. `on_token`, when set, is
  // called with each new token. Throws tide::Error for an empty prompt, out-of-vocabulary ids, a sequence
  // the KV cache cannot hold, or a request that finished with an error.
  GenerateResult generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                          const std::function<void(int32_t)>& on_token = {});

  // Runs every request to completion together, with continuous batching, in the calling thread: each step
  // the scheduler picks decode tokens and prefill chunks within max_num_batched_tokens / max_num_seqs /
  // max_prefill_chunk, the engine runs its block copies, one forward over the mixed batch and one sample op
  // over all rows (per row: the request's sampling parameters, its seed and draw counter = its output tokens
  // so far, so its ids do not depend on the rest of the batch), then hands the ids back to the scheduler.
  // Returns one result per request, in order. Throws tide::Error naming the request (before running any)
  // when one is invalid or can never fit; blocks go back to the pools whatever happens, also when
  // `on_token` throws.
  std::vector<GenerateResult> generate_batch(std::span<const BatchRequest> requests,
                                             const BatchTokenCallback& on_token = {});

  // Logits [positions][vocab] of `prompt`: every position, or only the last one. Computed through the same
  // chunked, paged path as generate(); only the last position may come from a reused prefix.
  std::vector<std::vector<float>> prompt_logits(std::span<const int32_t> prompt, bool all_positions);

 private:
  // Runs `tokens` (positions seq.num_computed() ...) of one sequence through the model in chunks; calls
  // `on_logits` with each chunk's logits ([rows selected by want_logits(index in tokens), V], backend memory).
  void extend(SequenceKv& seq, std::span<const int32_t> tokens, const std::function<bool(size_t)>& want_logits,
              const std::function<void(const Tensor&)>& on_logits);
  // Starts `seq` on `prompt`, reusing the cached prefix (its length goes to `cached_tokens`) and computing
  // the rest; returns the last position's logits ([1, V], backend memory).
  Tensor prefill(SequenceKv& seq, std::span<const int32_t> prompt, int64_t& cached_tokens);
  // Executes the block copies (evictions to the host tier, copies back) the KV manager asked for.
  void run_block_copies();
  void check_prompt(std::span<const int32_t> prompt, int64_t max_new_tokens) const;
  void check_request(std::span<const int32_t> prompt, const GenerateOptions& options) const;

  std::unique_ptr<Backend> backend_;
  Cohere2Model model_;
  Tokenizer tokenizer_;
  EngineOptions options_;
  KvCacheManager kv_manager_;
  std::vector<KvStorage> kv_storage_;
  std::vector<Tensor> host_kv_storage_;  // per pool: [host blocks, block bytes], host memory
  std::vector<int32_t> stop_ids_;
};

}  // namespace tide
