#include "runtime/engine.h"

#include <algorithm>
#include <deque>
#include <exception>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tide {
namespace {

// Splits a byte budget over the pools by need (design/kv-cache.md): a global pool needs its layers x the
// context, a sliding pool its layers x min(W + chunk + block_size, context) per sequence. Each sliding pool is
// first given one sequence's worth (it is small), so that a budget below one full-context sequence still
// serves shorter ones; the rest is split in proportion to need, which lets every pool hold the same number
// of full-context sequences.
std::vector<int32_t> split_budget(const Cohere2Model& model, const EngineOptions& options, int64_t budget) {
  const ModelConfig& c = model.config();
  const KvCacheDtype dtype = kv_cache_dtype(options, model);
  const int64_t context = options.max_model_len > 0 ? options.max_model_len : c.max_position_embeddings;
  const size_t num_groups = c.groups.size();
  std::vector<double> need(num_groups), reserved(num_groups, 0.0);
  double total_need = 0, total_reserved = 0;
  for (size_t g = 0; g < num_groups; ++g) {
    const int64_t window = c.groups[g].window;
    const int64_t tokens =
        window == 0 ? context : std::min(window + options.max_prefill_chunk + options.block_size, context);
    const auto group = static_cast<int>(g);
    const double bytes = static_cast<double>(tokens) * static_cast<double>(model.kv_block_bytes(group, 1, dtype));
    need[g] = bytes;
    total_need += bytes;
    if (window != 0) reserved[g] = bytes + static_cast<double>(model.kv_block_bytes(group, options.block_size, dtype));
    total_reserved += reserved[g];
  }
  const bool reserve = total_reserved < static_cast<double>(budget);
  const double rest = static_cast<double>(budget) - (reserve ? total_reserved : 0.0);
  std::vector<int32_t> blocks;
  for (size_t g = 0; g < num_groups; ++g) {
    const double share = (reserve ? reserved[g] : 0.0) + rest * need[g] / total_need;
    const int64_t block_bytes = model.kv_block_bytes(static_cast<int>(g), options.block_size, dtype);
    const double n = share / static_cast<double>(block_bytes);
    blocks.push_back(static_cast<int32_t>(std::min<double>(n, INT32_MAX)));
  }
  return blocks;
}

// EOS ids from generation_config.json (an int or a list), when the file exists.
std::vector<int32_t> generation_config_eos(const std::filesystem::path& dir) {
  std::ifstream in(dir / "generation_config.json");
  if (!in) return {};
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("eos_token_id")) return {};
  std::vector<int32_t> ids;
  const nlohmann::json& eos = j.at("eos_token_id");
  for (const nlohmann::json& v : eos.is_array() ? eos : nlohmann::json::array({eos})) {
    if (!v.is_number_integer()) fail("{}: eos_token_id must be integers", (dir / "generation_config.json").string());
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

WeightLoadOptions weight_load_options(const EngineOptions& options) {
  if (!options.quantization.empty() && options.quantization != "fp8") {
    fail("--quantization must be fp8 (or absent), got '{}'", options.quantization);
  }
  return WeightLoadOptions{options.quantization == "fp8", options.load_progress, options.load_format};
}

// A sequence whose blocks go back to their pools when it goes out of scope, error or not.
class ScopedSequence {
 public:
  explicit ScopedSequence(KvCacheManager& kv) : kv_(kv) {}
  ~ScopedSequence() { kv_.free(seq_); }
  ScopedSequence(const ScopedSequence&) = delete;
  ScopedSequence& operator=(const ScopedSequence&) = delete;
  SequenceKv& get() { return seq_; }

 private:
  KvCacheManager& kv_;
  SequenceKv seq_;
};

}  // namespace

KvCacheDtype kv_cache_dtype(const EngineOptions& options, const Cohere2Model& model) {
  const std::string& d = options.kv_cache_dtype;
  if (d.empty() || d == "auto") return KvCacheDtype::kAuto;
  if (d != "fp8" && d != "fp8_e4m3") fail("--kv-cache-dtype must be auto or fp8 (fp8_e4m3), got '{}'", d);
  const int64_t head_dim = model.config().head_dim;
  if (!model.backend().supports_fp8_kv(head_dim)) {
    fail("--kv-cache-dtype {}: the {} backend has no FP8 KV cache for this model's head_dim {}", d,
         model.backend().name(), head_dim);
  }
  return KvCacheDtype::kFp8;
}

EngineOptions resolve_kv_budget(EngineOptions options, const Cohere2Model& model) {
  const int64_t model_max = model.config().max_position_embeddings;
  if (options.max_model_len < 0 || options.max_model_len > model_max) {
    fail("--max-model-len must be in [1, {}] (the model's maximum length; 0: that), got {}", model_max,
         options.max_model_len);
  }
  if (options.max_model_len == 0) options.max_model_len = model_max;
  if (options.kv_cache_memory != 0) return options;
  if (!(options.gpu_memory_utilization > 0 && options.gpu_memory_utilization <= 1)) {
    fail("--gpu-memory-utilization must be in (0, 1], got {}", options.gpu_memory_utilization);
  }
  const std::optional<Backend::MemoryInfo> memory = model.backend().memory_info();
  if (!memory) {
    options.kv_cache_memory = int64_t{256} << 20;
    return options;
  }
  // What one step's activations may take at most: the hidden states, qkv and MLP intermediates (counted at
  // 4 bytes) of its tokens (a batched step: max_num_batched_tokens; prompt_logits: a prefill chunk), the f32
  // logits of one row per sequence (at least 256, a decode graph's batch), and 1 GiB for kernels' scratch
  // and the library.
  const ModelConfig& c = model.config();
  const int64_t step_tokens = std::max(options.max_prefill_chunk, options.max_num_batched_tokens);
  const int64_t logit_rows = std::max<int64_t>(256, std::min(options.max_num_seqs, step_tokens));
  const int64_t reserve = (int64_t{1} << 30) +
                          step_tokens * (8 * c.hidden_size + c.qkv_size() + 3 * c.intermediate_size) * 4 +
                          logit_rows * c.vocab_size * 4;
  const int64_t used = memory->total - memory->free;  // the weights, mostly
  const auto allowed = static_cast<int64_t>(options.gpu_memory_utilization * static_cast<double>(memory->total));
  options.kv_cache_memory = allowed - used - reserve;
  if (options.kv_cache_memory <= 0) {
    fail("no GPU memory is left for the KV cache: {} of {} bytes are in use after loading the model, "
         "--gpu-memory-utilization {} allows {}, and activations need about {}",
         used, memory->total, options.gpu_memory_utilization, allowed, reserve);
  }
  return options;
}

std::vector<PoolSpec> plan_kv_pools(const Cohere2Model& model, const EngineOptions& options) {
  if (options.block_size <= 0) fail("--block-size must be positive, got {}", options.block_size);
  if (options.max_prefill_chunk <= 0) fail("prefill chunk must be positive, got {}", options.max_prefill_chunk);
  if (options.kv_cache_memory <= 0) fail("--kv-cache-memory must be positive, got {}", options.kv_cache_memory);
  if (options.max_num_batched_tokens <= 0) {
    fail("--max-num-batched-tokens must be positive, got {}", options.max_num_batched_tokens);
  }
  if (options.max_num_seqs <= 0) fail("--max-num-seqs must be positive, got {}", options.max_num_seqs);
  if (options.host_kv_cache_memory < 0) {
    fail("--host-kv-cache-memory must be >= 0, got {}", options.host_kv_cache_memory);
  }
  const std::vector<int32_t> device = split_budget(model, options, options.kv_cache_memory);
  const std::vector<int32_t> host = split_budget(model, options, options.host_kv_cache_memory);
  std::vector<PoolSpec> specs;
  for (size_t g = 0; g < device.size(); ++g) {
    if (device[g] < 1) {
      fail("--kv-cache-memory of {} bytes leaves no block for the layer group of window {}", options.kv_cache_memory,
           model.config().groups[g].window);
    }
    specs.push_back(PoolSpec{model.config().groups[g].window, device[g], host[g]});
  }
  return specs;
}

Engine::Engine(const std::filesystem::path& model_dir, std::unique_ptr<Backend> backend, EngineOptions options)
    : backend_(std::move(backend)),
      model_(Cohere2Model::load(model_dir, *backend_, weight_load_options(options))),
      tokenizer_(Tokenizer::from_dir(model_dir)),
      options_(resolve_kv_budget(options, model_)),
      kv_manager_(options.block_size, plan_kv_pools(model_, options_), options.enable_prefix_caching) {
  model_.set_graphs_enabled(!options_.enforce_eager);
  const KvCacheDtype kv_dtype = kv_cache_dtype(options_, model_);
  std::vector<int32_t> num_blocks;
  for (int p = 0; p < kv_manager_.num_pools(); ++p) {
    const PoolSpec& spec = kv_manager_.spec(p);
    num_blocks.push_back(spec.num_blocks);
    const int64_t block_bytes = model_.kv_block_bytes(p, options_.block_size, kv_dtype);
    host_kv_storage_.push_back(backend_->alloc_host(DType::kU8, Shape{spec.num_host_blocks, block_bytes}));
  }
  kv_storage_ = model_.allocate_kv(options_.block_size, num_blocks, kv_dtype);

  stop_ids_ = generation_config_eos(model_dir);
  for (int32_t id : config().eos_token_ids) stop_ids_.push_back(id);
  if (tokenizer_.eos_id()) stop_ids_.push_back(*tokenizer_.eos_id());
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());

  start_loop();
}

void Engine::check_prompt(std::span<const int32_t> prompt, int64_t max_new_tokens) const {
  if (prompt.empty()) fail("the prompt is empty");
  for (int32_t id : prompt) {
    if (id < 0 || id >= config().vocab_size) {
      fail("prompt token id {} is out of range (vocabulary size {})", id, config().vocab_size);
    }
  }
  const int64_t total = static_cast<int64_t>(prompt.size()) + max_new_tokens;
  if (total > max_model_len()) {
    fail("prompt ({} tokens) + max tokens ({}) exceeds the maximum length {} (--max-model-len)", prompt.size(), max_new_tokens,
         max_model_len());
  }
  if (!kv_manager_.fits(total, options_.max_prefill_chunk)) {
    fail("prompt ({} tokens) + max tokens ({}) does not fit in the KV cache; raise the KV cache memory",
         prompt.size(), max_new_tokens);
  }
}

void Engine::extend(SequenceKv& seq, std::span<const int32_t> tokens, const std::function<bool(size_t)>& want_logits,
                    const std::function<void(const Tensor&)>& on_logits) {
  for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(options_.max_prefill_chunk)) {
    const size_t end = std::min(tokens.size(), begin + static_cast<size_t>(options_.max_prefill_chunk));
    const int64_t start_pos = seq.num_computed();
    const auto chunk = tokens.subspan(begin, end - begin);
    kv_manager_.append(seq, static_cast<int64_t>(chunk.size()));
    run_block_copies();

    ForwardBatch batch;
    batch.token_ids.assign(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                           tokens.begin() + static_cast<std::ptrdiff_t>(end));
    ForwardSequence fs{start_pos, static_cast<int64_t>(end - begin), {}};
    for (const std::vector<int32_t>& table : seq.block_tables) fs.block_tables.emplace_back(table);
    batch.seqs.push_back(std::move(fs));
    for (size_t i = begin; i < end; ++i) {
      if (want_logits(i)) batch.logit_indices.push_back(static_cast<int32_t>(i - begin));
    }
    const Tensor logits = model_.forward(batch, kv_storage_);
    kv_manager_.commit(seq, chunk);
    on_logits(logits);
  }
}

void Engine::check_token_id(int32_t id, const char* what) const {
  if (id < 0 || id >= config().vocab_size) {
    fail("{} token id {} is out of range (vocabulary size {})", what, id, config().vocab_size);
  }
}

void Engine::check_request(std::span<const int32_t> prompt, const GenerateOptions& options) const {
  options.sampling.validate();
  if (options.max_tokens < 0) fail("max tokens must be >= 0, got {}", options.max_tokens);
  if (options.min_tokens < 0) fail("min tokens must be >= 0, got {}", options.min_tokens);
  if (options.n < 1 || options.n > kMaxSamplesPerRequest) {
    fail("n must be in [1, {}], got {}", kMaxSamplesPerRequest, options.n);
  }
  if (options.logprobs < -1 || options.logprobs > kMaxLogprobs) {
    fail("logprobs must be in [0, {}] (or -1: none), got {}", kMaxLogprobs, options.logprobs);
  }
  if (options.logprobs > config().vocab_size) {
    fail("logprobs {} exceeds the vocabulary size {}", options.logprobs, config().vocab_size);
  }
  check_prompt(prompt, options.max_tokens);
  for (int32_t id : options.stop_token_ids) check_token_id(id, "stop");
  for (const auto& [id, bias] : options.sampling.logit_bias) check_token_id(id, "logit_bias");
  for (const std::string& stop : options.stop) {
    if (stop.empty()) fail("stop strings must not be empty");
  }
}

GenerateResult Engine::generate(std::span<const int32_t> prompt, const GenerateOptions& options,
                                const std::function<void(int32_t)>& on_token) {
  check_request(prompt, options);  // the message without generate_batch's "request 0: "
  const BatchRequest request{std::vector<int32_t>(prompt.begin(), prompt.end()), options};
  BatchTokenCallback callback;
  if (on_token) callback = [&](size_t, int32_t id) { on_token(id); };
  std::vector<GenerateResult> results = generate_batch(std::span(&request, 1), callback);
  if (results[0].finish_reason == "error") fail("{}", results[0].error);
  return std::move(results[0]);
}

std::vector<GenerateResult> Engine::generate_batch(std::span<const BatchRequest> requests,
                                                   const BatchTokenCallback& on_token) {
  for (size_t i = 0; i < requests.size(); ++i) {
    try {
      check_request(requests[i].prompt, requests[i].options);
    } catch (const Error& e) {
      fail("request {}: {}", i, e.what());
    }
  }
  // Deltas of every request, in arrival order, consumed in this thread.
  struct Collector {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<std::pair<size_t, SampleDelta>> queue;
  };
  auto collector = std::make_shared<Collector>();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  std::vector<GenerateResult> results(requests.size());
  size_t unfinished = 0;
  auto cancel_all = [&] {
    for (const std::shared_ptr<RequestHandle>& h : handles) h->cancel();
  };
  std::exception_ptr error;
  std::vector<NewRequest> batch;
  for (size_t i = 0; i < requests.size(); ++i) {
    results[i].samples.resize(static_cast<size_t>(requests[i].options.n));
    batch.push_back(NewRequest{requests[i].prompt, requests[i].options, [collector, i](SampleDelta&& d) {
                                 {
                                   std::lock_guard lock(collector->mutex);
                                   collector->queue.emplace_back(i, std::move(d));
                                 }
                                 collector->ready.notify_one();
                               }});
  }
  try {
    handles = submit_together(std::move(batch));
    for (const BatchRequest& r : requests) unfinished += static_cast<size_t>(r.options.n);
  } catch (...) {  // shutting down: nothing was queued
    error = std::current_exception();
  }
  while (unfinished > 0) {
    std::pair<size_t, SampleDelta> item;
    {
      std::unique_lock lock(collector->mutex);
      collector->ready.wait(lock, [&] { return !collector->queue.empty(); });
      item = std::move(collector->queue.front());
      collector->queue.pop_front();
    }
    const auto& [i, delta] = item;
    results[i].samples[static_cast<size_t>(delta.index)].add(delta);
    if (delta.finished()) --unfinished;
    if (on_token && !error && delta.index == 0) {
      try {
        for (int32_t id : delta.ids) on_token(i, id);
      } catch (...) {
        error = std::current_exception();
        cancel_all();
      }
    }
  }
  if (error) std::rethrow_exception(error);
  for (GenerateResult& r : results) {
    if (!r.samples.empty()) static_cast<SampleResult&>(r) = r.samples[0];
  }
  return results;
}

std::vector<std::vector<float>> Engine::prompt_logits(std::span<const int32_t> prompt, bool all_positions) {
  check_prompt(prompt, 0);
  std::lock_guard lock(step_mutex_);  // between the loop's steps; the sequence's blocks are back before it goes on
  ScopedSequence seq(kv_manager_);
  const auto vocab = static_cast<size_t>(config().vocab_size);
  std::vector<std::vector<float>> out;
  auto download_rows = [&](const Tensor& logits) {
    std::vector<float> host(static_cast<size_t>(logits.numel()));
    backend_->download(logits, host.data());
    for (size_t r = 0; r < static_cast<size_t>(logits.dim(0)); ++r) {
      out.emplace_back(host.begin() + static_cast<std::ptrdiff_t>(r * vocab),
                       host.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab));
    }
  };
  if (all_positions) {
    extend(seq.get(), prompt, [](size_t) { return true; }, download_rows);
  } else {
    int64_t cached_tokens = 0;
    download_rows(prefill(seq.get(), prompt, cached_tokens));
  }
  return out;
}

Tensor Engine::prefill(SequenceKv& seq, std::span<const int32_t> prompt, int64_t& cached_tokens) {
  cached_tokens = kv_manager_.admit(seq, prompt);
  run_block_copies();  // copies back from the host tier land before the first step reads them
  const auto rest = prompt.subspan(static_cast<size_t>(cached_tokens));
  Tensor last;
  extend(seq, rest, [&](size_t i) { return i == rest.size() - 1; }, [&](const Tensor& t) {
    if (t.dim(0) > 0) last = t;
  });
  return last;
}

void Engine::run_block_copies() {
  for (int p = 0; p < kv_manager_.num_pools(); ++p) {
    const std::vector<BlockCopy> copies = kv_manager_.take_copies(p);
    if (!copies.empty()) backend_->copy_blocks(kv_storage_[static_cast<size_t>(p)], host_kv_storage_[static_cast<size_t>(p)], copies);
  }
}

std::vector<KvPoolReport> Engine::kv_report() const {
  std::lock_guard lock(step_mutex_);
  std::vector<KvPoolReport> report;
  for (int p = 0; p < kv_manager_.num_pools(); ++p) {
    const LayerGroup& group = config().groups[static_cast<size_t>(p)];
    report.push_back(KvPoolReport{group.window, group.num_layers(), kv_manager_.pool(p).stats()});
  }
  return report;
}

}  // namespace tide
