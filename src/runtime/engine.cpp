#include "runtime/engine.h"

#include <algorithm>
#include <deque>
#include <exception>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/engine_inbox.h"

namespace tide {
namespace {

// EOS ids from generation_config.json (an int or a list), when the file exists. A file that is there but
// malformed, or whose token ids are mistyped or outside the vocabulary, is refused naming the file and the
// field: ignoring it would leave generation without the stop ids the model was trained to end on.
std::vector<int32_t> generation_config_eos(const std::filesystem::path& dir, int64_t vocab_size) {
  const std::filesystem::path path = dir / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  const std::string file = path.string();
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", file);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail("{}: not valid JSON", file);
  if (!j.is_object()) fail("{}: must be a JSON object, got a JSON {}", file, j.type_name());
  auto token_id = [&](const nlohmann::json& v, const char* field) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab_size) {
      fail("{}: field '{}' must hold token ids in [0, {}) (vocab_size of config.json), got {}", file, field,
           vocab_size, v.dump());
    }
    return static_cast<int32_t>(v.get<int64_t>());
  };
  for (const char* field : {"bos_token_id", "pad_token_id"}) {
    if (j.contains(field) && !j.at(field).is_null()) token_id(j.at(field), field);
  }
  if (!j.contains("eos_token_id") || j.at("eos_token_id").is_null()) return {};
  std::vector<int32_t> ids;
  const nlohmann::json& eos = j.at("eos_token_id");
  for (const nlohmann::json& v : eos.is_array() ? eos : nlohmann::json::array({eos})) {
    ids.push_back(token_id(v, "eos_token_id"));
  }
  return ids;
}

WeightLoadOptions weight_load_options(const EngineOptions& options) {
  return WeightLoadOptions{options.quantization == Quantization::kFp8, options.load_progress, options.load_format};
}

std::filesystem::path draft_dir(const EngineOptions& options) {
  const bool draft = options.speculative && options.speculative->method == spec::SpeculativeConfig::Method::kDraftModel;
  return draft ? std::filesystem::path(options.speculative->model) : std::filesystem::path();
}

}  // namespace

EngineOptions resolve_engine_options(EngineOptions options, const Cohere2Model& model) {
  const int64_t head_dim = model.config().head_dim;
  if (options.kv_cache_dtype == KvCacheDtype::kFp8 && !model.backend().supports_fp8_kv(head_dim)) {
    fail("kv_cache_dtype fp8: the {} backend has no FP8 KV cache for this model's head_dim {}",
         model.backend().name(), head_dim);
  }
  const int64_t model_max = model.config().max_position_embeddings;
  if (options.max_model_len < 0 || options.max_model_len > model_max) {
    fail("max_model_len must be in [1, {}] (the model's maximum length; 0: that), got {}", model_max,
         options.max_model_len);
  }
  if (options.max_model_len == 0) options.max_model_len = model_max;
  const std::optional<Backend::MemoryInfo> memory = model.backend().memory_info();
  // A GPU step of 8192 tokens keeps the tensor cores busy and prefills a long prompt in few chunks; the CPU
  // computes a step in proportion to its tokens, so smaller steps keep decodes of other requests flowing.
  if (options.max_num_batched_tokens == 0) options.max_num_batched_tokens = memory ? 8192 : 2048;
  if (options.max_prefill_chunk == 0) options.max_prefill_chunk = memory ? 8192 : 512;
  if (options.max_prefill_chunk < 0) fail("max_prefill_chunk must be positive, got {}", options.max_prefill_chunk);
  if (options.max_num_batched_tokens < 0) {
    fail("max_num_batched_tokens must be positive, got {}", options.max_num_batched_tokens);
  }
  if (options.max_num_seqs <= 0) fail("max_num_seqs must be positive, got {}", options.max_num_seqs);
  if (options.kv_cache_memory != 0) return options;
  if (!(options.gpu_memory_utilization > 0 && options.gpu_memory_utilization <= 1)) {
    fail("gpu_memory_utilization must be in (0, 1], got {}", options.gpu_memory_utilization);
  }
  if (!memory) {
    options.kv_cache_memory = int64_t{256} << 20;
    return options;
  }
  // What the largest step the scheduler forms may take beside the arena: its tokens' hidden states, qkv and
  // MLP intermediates (counted at 4 bytes, generously: the forward pass's buffers and the attention's
  // partials), the f32 logits of its rows to sample twice (the sample op's and the logprobs' copy) plus
  // the decode graphs' [256, vocab] and a draft model's kept rows, and 1 GiB for kernels' scratch, the decode graphs' buffers and the
  // libraries. Freed activations are cached for reuse and given back before an allocation would fail.
  const ModelConfig& c = model.config();
  const int64_t step_tokens = std::max(options.max_prefill_chunk, options.max_num_batched_tokens);
  // Rows to sample: one per sequence, 1 + k in a verify step (speculative decoding); a draft model keeps k
  // rows of its own logits per sequence for the sample op.
  const int64_t k = options.speculative ? options.speculative->num_speculative_tokens : 0;
  const int64_t logit_rows = std::min(options.max_num_seqs * (1 + k), step_tokens);
  const bool draft = options.speculative && options.speculative->method == spec::SpeculativeConfig::Method::kDraftModel;
  const int64_t draft_rows = draft ? options.max_num_seqs * k : 0;
  // An FP8 cache's prefill attention may dequantize the blocks it reads (kFp8KvPrefillScratchBytes): at most
  // max_num_seqs x max_model_len positions of one layer's K and V in bf16.
  const int64_t dequant_scratch =
      options.kv_cache_dtype == KvCacheDtype::kFp8
          ? std::min(kFp8KvPrefillScratchBytes,
                     options.max_num_seqs * options.max_model_len * 2 * c.kv_size() * 2)
          : 0;
  const int64_t reserve = (int64_t{1} << 30) + dequant_scratch +
                          step_tokens * (8 * c.hidden_size + c.qkv_size() + 3 * c.intermediate_size) * 4 +
                          (2 * logit_rows + draft_rows + 256) * c.vocab_size * 4;
  const int64_t used = memory->total - memory->free;  // the weights, mostly
  const auto allowed = static_cast<int64_t>(options.gpu_memory_utilization * static_cast<double>(memory->total));
  options.kv_cache_memory = allowed - used - reserve;
  if (options.kv_cache_memory <= 0) {
    fail("no GPU memory is left for the KV cache: {} of {} bytes are in use after loading the model, "
         "gpu_memory_utilization {} allows {}, and steps of {} tokens need about {}",
         used, memory->total, options.gpu_memory_utilization, allowed, step_tokens, reserve);
  }
  return options;
}

namespace {

// The largest block a draft's layout in the model's arena may use (positions).
constexpr int64_t kMaxDraftBlockSize = 256;
// The draft's chain of block keys in a shared arena (the model's extra key is 0): its blocks never serve the
// model's hits, nor the model's the draft's.
constexpr uint64_t kDraftKeyDomain = 1;

// The arena's pool: the model's layer groups, then the draft's when it shares the arena.
std::shared_ptr<BlockPool> arena_pool(const KvArenaSpec& arena, const ModelConfig& model, const ModelConfig* draft) {
  std::vector<int64_t> windows = model.group_windows();
  if (draft != nullptr) {
    const std::vector<int64_t> d = draft->group_windows();
    windows.insert(windows.end(), d.begin(), d.end());
  }
  return std::make_shared<BlockPool>(arena.num_blocks, arena.num_host_blocks, windows);
}

// KV bytes of one position over every layer of `model` (a block holds one group's layers).
int64_t kv_bytes_per_position(const Cohere2Model& model, int64_t block_size, KvCacheDtype dtype) {
  const auto groups = static_cast<int64_t>(model.config().groups.size());
  return model.kv_block_bytes(block_size, dtype) * groups / block_size;
}

// The draft's share of kv_cache_memory: in proportion to its bytes per position beside the model's, so that
// both caches hold about as many positions.
int64_t draft_kv_bytes(const Cohere2Model& model, const EngineOptions& options, const Cohere2Model& draft) {
  const auto m = static_cast<double>(kv_bytes_per_position(model, options.block_size, options.kv_cache_dtype));
  const auto d = static_cast<double>(kv_bytes_per_position(draft, options.block_size, draft_kv_cache_dtype(options, draft)));
  return static_cast<int64_t>(static_cast<double>(options.kv_cache_memory) * d / (m + d));
}

}  // namespace

KvCacheDtype draft_kv_cache_dtype(const EngineOptions& options, const Cohere2Model& draft) {
  const bool fp8 = options.kv_cache_dtype == KvCacheDtype::kFp8 &&
                   draft.backend().supports_fp8_kv(draft.config().head_dim);
  return fp8 ? KvCacheDtype::kFp8 : KvCacheDtype::kAuto;
}

std::optional<DraftArenaLayout> draft_arena_layout(const Cohere2Model& model, const EngineOptions& options,
                                                   const Cohere2Model& draft) {
  const ModelConfig& m = model.config();
  const ModelConfig& d = draft.config();
  if (d.head_dim != m.head_dim || draft_kv_cache_dtype(options, draft) != options.kv_cache_dtype) return std::nullopt;
  // Vectors of one position a model block holds (per K and V): layers x kv heads.
  const int64_t slots = m.layers_per_kv_block * m.num_heads_kv;
  std::optional<DraftArenaLayout> best;
  for (int64_t r = 1; options.block_size * r <= kMaxDraftBlockSize; r *= 2) {
    if (slots / (d.num_heads_kv * r) < d.layers_per_kv_block) break;  // larger blocks leave fewer layer slots
    if (slots % (d.num_heads_kv * r) != 0) continue;
    best = DraftArenaLayout{options.block_size * r, slots / (d.num_heads_kv * r)};
  }
  return best;
}

KvArenaSpec plan_draft_kv_arena(const Cohere2Model& model, const EngineOptions& options, const Cohere2Model& draft) {
  const int64_t bytes = draft_kv_bytes(model, options, draft);
  const int64_t block_bytes = draft.kv_block_bytes(options.block_size, draft_kv_cache_dtype(options, draft));
  const int64_t blocks = bytes / block_bytes;
  if (blocks < 1) {
    fail("the draft model's share of kv_cache_memory ({} of {} bytes) holds no KV block of {} bytes", bytes,
         options.kv_cache_memory, block_bytes);
  }
  return KvArenaSpec{static_cast<int32_t>(std::min<int64_t>(blocks, INT32_MAX)), 0};
}

KvArenaSpec plan_kv_arena(const Cohere2Model& model, const EngineOptions& options, const Cohere2Model* draft) {
  if (options.block_size <= 0) fail("block_size must be positive, got {}", options.block_size);
  if (options.kv_cache_memory <= 0) fail("kv_cache_memory must be positive, got {}", options.kv_cache_memory);
  if (options.host_kv_cache_memory < 0) {
    fail("host_kv_cache_memory must be >= 0, got {}", options.host_kv_cache_memory);
  }
  const int64_t block_bytes = model.kv_block_bytes(options.block_size, options.kv_cache_dtype);
  const int64_t memory = options.kv_cache_memory - (draft ? draft_kv_bytes(model, options, *draft) : 0);
  const int64_t blocks = memory / block_bytes;
  if (blocks < 1) {
    fail("kv_cache_memory of {} bytes{} holds no KV block ({} bytes: {} layers x {} positions)", options.kv_cache_memory,
         draft ? fmt::format(" ({} beside the draft model's share)", memory) : std::string(), block_bytes,
         model.config().layers_per_kv_block, options.block_size);
  }
  const int64_t host_blocks = options.host_kv_cache_memory / block_bytes;
  return KvArenaSpec{static_cast<int32_t>(std::min<int64_t>(blocks, INT32_MAX)),
                     static_cast<int32_t>(std::min<int64_t>(host_blocks, INT32_MAX))};
}

Engine::Engine(const std::filesystem::path& model_dir, std::unique_ptr<Backend> backend, EngineOptions options)
    : executor_(model_dir, std::move(backend), weight_load_options(options), draft_dir(options)),
      tokenizer_(Tokenizer::from_dir(model_dir)),
      options_(resolve_engine_options(options, executor_.model())),
      draft_layout_(executor_.draft() ? draft_arena_layout(executor_.model(), options_, *executor_.draft())
                                      : std::nullopt),
      arena_(plan_kv_arena(executor_.model(), options_, draft_layout_ ? nullptr : executor_.draft())),
      kv_manager_(options_.block_size, config().group_windows(),
                  arena_pool(arena_, config(), draft_layout_ ? &executor_.draft()->config() : nullptr), 0,
                  options_.enable_prefix_caching, 0) {
  executor_.set_graphs_enabled(!options_.enforce_eager);
  executor_.allocate_kv(options_.block_size, arena_, options_.kv_cache_dtype);
  if (const Cohere2Model* draft = executor_.draft()) {
    if (draft_layout_) {
      // The draft's blocks are the arena's: what one model does not hold, the other may.
      executor_.share_draft_kv(draft_layout_->block_size, draft_layout_->num_layers);
      draft_kv_manager_.emplace(draft_layout_->block_size, draft->config().group_windows(), kv_manager_.shared_pool(),
                                kv_manager_.num_groups(), options_.enable_prefix_caching, kDraftKeyDomain);
    } else {
      const KvArenaSpec draft_arena = plan_draft_kv_arena(executor_.model(), options_, *draft);
      executor_.allocate_draft_kv(options_.block_size, draft_arena.num_blocks, draft_kv_cache_dtype(options_, *draft));
      draft_kv_manager_.emplace(options_.block_size, draft->config().group_windows(), draft_arena,
                                options_.enable_prefix_caching);
    }
  }

  stop_ids_ = generation_config_eos(model_dir, config().vocab_size);
  for (int32_t id : config().eos_token_ids) stop_ids_.push_back(id);
  if (tokenizer_.eos_id()) stop_ids_.push_back(*tokenizer_.eos_id());
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());

  start_loop();
}

void Engine::reset_kv_cache() {
  const Cohere2Model* draft = draft_layout_ ? executor_.draft() : nullptr;
  kv_manager_ = KvCacheManager(options_.block_size, config().group_windows(),
                               arena_pool(arena_, config(), draft ? &draft->config() : nullptr), 0,
                               options_.enable_prefix_caching, 0);
  if (draft != nullptr) {
    *draft_kv_manager_ = KvCacheManager(draft_layout_->block_size, draft->config().group_windows(),
                                        kv_manager_.shared_pool(), kv_manager_.num_groups(),
                                        options_.enable_prefix_caching, kDraftKeyDomain);
  }
}

Engine::~Engine() {
  {
    std::lock_guard lock(inbox_->mutex);
    inbox_->stop = true;
  }
  inbox_->wake.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<RequestHandle> Engine::submit(std::vector<int32_t> prompt, GenerateOptions options,
                                              DeltaCallback on_delta) {
  check_request(prompt, options);
  std::vector<NewRequest> one;
  one.push_back(NewRequest{std::move(prompt), std::move(options), std::move(on_delta)});
  return std::move(submit_together(std::move(one)).front());
}

std::vector<std::shared_ptr<RequestHandle>> Engine::submit_together(std::vector<NewRequest> requests) {
  std::weak_ptr<Inbox> weak = inbox_;
  auto cancel = [weak](uint64_t id) {
    if (const std::shared_ptr<Inbox> inbox = weak.lock()) {
      {
        std::lock_guard lock(inbox->mutex);
        inbox->cancels.push_back(id);
      }
      inbox->wake.notify_all();
    }
  };
  std::vector<std::shared_ptr<RequestHandle>> handles;
  {
    std::lock_guard lock(inbox_->mutex);
    if (inbox_->stop) fail("the engine is shutting down");
    for (NewRequest& r : requests) {
      handles.push_back(std::make_shared<RequestHandle>(inbox_->next_id++, r.options.n, cancel, std::move(r.on_delta)));
      inbox_->submissions.push_back(
          Submission{handles.back(), std::move(r.prompt), std::move(r.options), r.prompt_logits});
    }
  }
  inbox_->wake.notify_all();
  return handles;
}

void Engine::check_prompt(std::span<const int32_t> prompt, int64_t max_new_tokens) const {
  if (prompt.empty()) fail("the prompt is empty");
  for (int32_t id : prompt) {
    if (id < 0 || id >= config().vocab_size) {
      fail("prompt token id {} is out of range (vocabulary size {})", id, config().vocab_size);
    }
  }
  if (max_new_tokens < 0) fail("max tokens must be >= 0, got {}", max_new_tokens);
  // Compared before adding, so that no max_new_tokens can overflow the sum.
  const int64_t total = static_cast<int64_t>(prompt.size()) + std::min(max_new_tokens, max_model_len() + 1);
  if (total > max_model_len()) {
    fail("prompt ({} tokens) + max tokens ({}) exceeds the maximum length {} (max_model_len)", prompt.size(),
         max_new_tokens, max_model_len());
  }
  const int64_t chunk = std::min(options_.max_prefill_chunk, options_.max_num_batched_tokens);
  if (!kv_manager_.fits(total, chunk)) {
    fail("prompt ({} tokens) + max tokens ({}) needs {} KV blocks even when nothing else runs, but the KV cache "
         "holds {} (kv_cache_memory {} bytes)",
         prompt.size(), max_new_tokens, kv_manager_.max_arena_blocks(total, chunk), arena_.num_blocks,
         options_.kv_cache_memory);
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
  if (const auto& budget = options.thinking_budget) {
    check_token_id(budget->open_id, "thinking budget's opening");
    check_token_id(budget->close_id, "thinking budget's closing");
    if (budget->open_id == budget->close_id) fail("the thinking budget's opening and closing tokens must differ");
    if (budget->max_tokens < 0) fail("the thinking budget must be >= 0 tokens, got {}", budget->max_tokens);
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
  GenerateOptions options;
  options.max_tokens = 0;
  std::vector<NewRequest> one;
  one.push_back(NewRequest{std::vector<int32_t>(prompt.begin(), prompt.end()), options, {},
                           all_positions ? PromptLogits::kAll : PromptLogits::kLast});
  const std::shared_ptr<RequestHandle> handle = std::move(submit_together(std::move(one)).front());
  std::vector<std::vector<float>> rows;
  while (std::optional<SampleDelta> d = handle->next()) {
    for (std::vector<float>& row : d->prompt_logits) rows.push_back(std::move(row));
    if (d->finish_reason == FinishReason::kError) fail("{}", d->error);
    if (d->finish_reason == FinishReason::kAbort) fail("the engine stopped before the prompt was computed");
  }
  TIDE_CHECK(rows.size() == (all_positions ? prompt.size() : 1));
  return rows;
}

KvReport Engine::kv_report() const {
  std::lock_guard lock(step_mutex_);
  KvReport report;
  report.block_size = options_.block_size;
  report.block_bytes = model().kv_block_bytes(options_.block_size, options_.kv_cache_dtype);
  report.arena = kv_manager_.pool().stats();
  for (int g = 0; g < kv_manager_.num_groups(); ++g) {
    const LayerGroup& group = config().groups[static_cast<size_t>(g)];
    report.groups.push_back(KvGroupReport{group.window, group.num_layers(), kv_manager_.pool().group_stats(g)});
  }
  return report;
}

}  // namespace tide
