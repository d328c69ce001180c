// Engine: a loaded model, its tokenizer, a backend and the paged KV cache, with synchronous generation
// for one sequence at a time: prefill the prompt in chunks, then decode token by token reusing the KV cache
// (the prompt is never recomputed). The engine runtime issue adds the threaded step loop and batching of
// many requests on top of the same ForwardBatch path.
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
  int64_t max_prefill_chunk = 512;               // prompt tokens per forward step
  bool enforce_eager = false;                    // never replay recorded graphs of decode steps
};

struct GenerateOptions {
  int64_t max_tokens = 16;
  SamplingParams sampling;
  bool ignore_eos = false;
};

struct GenerateResult {
  std::vector<int32_t> ids;    // generated tokens (the stop token included when generation hit one)
  std::string finish_reason;   // "stop" (a stop token) or "length" (max_tokens)
  int64_t cached_tokens = 0;   // prompt tokens taken from the prefix cache instead of computed
};

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

  // Generates up to max_tokens after `prompt`. `on_token`, when set, is called with each new token.
  // Throws tide::Error for an empty prompt, out-of-vocabulary ids, or a sequence the KV cache cannot hold.
  GenerateResult generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                          const std::function<void(int32_t)>& on_token = {});

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
