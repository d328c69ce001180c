#include "runtime/engine.h"

#include <algorithm>
#include <fstream>
#include <random>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "sched/scheduler.h"

namespace tide {
namespace {

// Splits a byte budget over the pools by need (design/kv-cache.md): a global pool needs its layers x the
// context, a sliding pool its layers x min(W + chunk + block_size, context) per sequence. Each sliding pool is
// first given one sequence's worth (it is small), so that a budget below one full-context sequence still
// serves shorter ones; the rest is split in proportion to need, which lets every pool hold the same number
// of full-context sequences.
std::vector<int32_t> split_budget(const Cohere2Model& model, const EngineOptions& options, int64_t budget) {
  const ModelConfig& c = model.config();
  const int64_t context = c.max_position_embeddings;
  const size_t num_groups = c.groups.size();
  std::vector<double> need(num_groups), reserved(num_groups, 0.0);
  double total_need = 0, total_reserved = 0;
  for (size_t g = 0; g < num_groups; ++g) {
    const int64_t window = c.groups[g].window;
    const int64_t tokens =
        window == 0 ? context : std::min(window + options.max_prefill_chunk + options.block_size, context);
    const double bytes = static_cast<double>(tokens) * static_cast<double>(model.kv_block_bytes(static_cast<int>(g), 1));
    need[g] = bytes;
    total_need += bytes;
    if (window != 0) reserved[g] = bytes + static_cast<double>(model.kv_block_bytes(static_cast<int>(g), options.block_size));
    total_reserved += reserved[g];
  }
  const bool reserve = total_reserved < static_cast<double>(budget);
  const double rest = static_cast<double>(budget) - (reserve ? total_reserved : 0.0);
  std::vector<int32_t> blocks;
  for (size_t g = 0; g < num_groups; ++g) {
    const double share = (reserve ? reserved[g] : 0.0) + rest * need[g] / total_need;
    const double n = share / static_cast<double>(model.kv_block_bytes(static_cast<int>(g), options.block_size));
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

EngineOptions resolve_kv_budget(EngineOptions options, const Cohere2Model& model) {
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
      model_(Cohere2Model::load(model_dir, *backend_)),
      tokenizer_(Tokenizer::from_dir(model_dir)),
      options_(resolve_kv_budget(options, model_)),
      kv_manager_(options.block_size, plan_kv_pools(model_, options_), options.enable_prefix_caching) {
  model_.set_graphs_enabled(!options_.enforce_eager);
  std::vector<int32_t> num_blocks;
  for (int p = 0; p < kv_manager_.num_pools(); ++p) {
    const PoolSpec& spec = kv_manager_.spec(p);
    num_blocks.push_back(spec.num_blocks);
    const int64_t block_bytes = model_.kv_block_bytes(p, options_.block_size);
    host_kv_storage_.push_back(backend_->alloc_host(DType::kU8, Shape{spec.num_host_blocks, block_bytes}));
  }
  kv_storage_ = model_.allocate_kv(options_.block_size, num_blocks);

  stop_ids_ = generation_config_eos(model_dir);
  for (int32_t id : config().eos_token_ids) stop_ids_.push_back(id);
  if (tokenizer_.eos_id()) stop_ids_.push_back(*tokenizer_.eos_id());
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
}

void Engine::check_prompt(std::span<const int32_t> prompt, int64_t max_new_tokens) const {
  if (prompt.empty()) fail("the prompt is empty");
  for (int32_t id : prompt) {
    if (id < 0 || id >= config().vocab_size) {
      fail("prompt token id {} is out of range (vocabulary size {})", id, config().vocab_size);
    }
  }
  const int64_t total = static_cast<int64_t>(prompt.size()) + max_new_tokens;
  if (total > config().max_position_embeddings) {
    fail("prompt ({} tokens) + max tokens ({}) exceeds the model's maximum length {}", prompt.size(),
         max_new_tokens, config().max_position_embeddings);
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

void Engine::check_request(std::span<const int32_t> prompt, const GenerateOptions& options) const {
  options.sampling.validate();
  if (options.max_tokens < 0) fail("max tokens must be >= 0, got {}", options.max_tokens);
  check_prompt(prompt, options.max_tokens);
  for (int32_t id : options.stop_token_ids) {
    if (id < 0 || id >= config().vocab_size) {
      fail("stop token id {} is out of range (vocabulary size {})", id, config().vocab_size);
    }
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
  Scheduler scheduler(kv_manager_, SchedulerOptions{options_.max_num_batched_tokens, options_.max_num_seqs,
                                                    options_.max_prefill_chunk, config().max_position_embeddings});
  // What the engine keeps per request beside the scheduler's Request: sampling state and what was emitted.
  struct Live {
    size_t index = 0;
    uint64_t seed = 0;  // the request's random stream: draw n uses (seed, n), whatever else a batch holds
    TokenHistory history;
    int64_t emitted = 0;  // output ids already handed to on_token
  };
  std::unordered_map<RequestId, Live> live;
  std::vector<GenerateResult> results(requests.size());
  std::random_device device;
  for (size_t i = 0; i < requests.size(); ++i) {
    const BatchRequest& req = requests[i];
    RequestParams params;
    params.prompt = req.prompt;
    params.max_tokens = req.options.max_tokens;
    if (!req.options.ignore_eos) params.stop_ids = stop_ids_;
    params.stop_ids.insert(params.stop_ids.end(), req.options.stop_token_ids.begin(), req.options.stop_token_ids.end());
    RequestId id = 0;
    try {
      id = scheduler.add(std::move(params));
    } catch (const Error& e) {
      fail("request {}: {}", i, e.what());
    }
    Live& l = live[id];
    l.index = i;
    const SamplingParams& sampling = req.options.sampling;
    l.seed = sampling.seed ? *sampling.seed : (uint64_t{device()} << 32 | device());
    if (sampling.has_penalties()) l.history.add_prompt(req.prompt);
  }
  auto params_of = [&](const Live& l) -> const SamplingParams& { return requests[l.index].options.sampling; };
  auto record = [&](const Request& r) {
    const auto it = live.find(r.id);
    GenerateResult& out = results[it->second.index];
    const auto ids = r.output_ids();
    out.ids.assign(ids.begin(), ids.end());
    out.finish_reason = to_string(r.finish_reason);
    out.error = r.error;
    out.cached_tokens = r.num_cached_tokens;
    out.num_preemptions = r.num_preemptions;
    live.erase(it);
  };

  std::vector<SamplingRow> rows;
  std::vector<int32_t> history_starts;
  std::vector<HistoryToken> history;
  int64_t idle_steps = 0;
  while (true) {
    // Finished at add() (max_tokens 0) or while scheduling (errors); those of a step are recorded below.
    for (const std::unique_ptr<Request>& r : scheduler.take_finished()) record(*r);
    if (!scheduler.has_unfinished()) break;

    const ScheduledStep step = scheduler.schedule();
    for (size_t p = 0; p < step.copies.size(); ++p) {  // evictions and copies back land before the forward
      if (!step.copies[p].empty()) backend_->copy_blocks(kv_storage_[p], host_kv_storage_[p], step.copies[p]);
    }
    std::vector<int32_t> sampled(step.sample_ids.size());
    if (step.empty()) {
      // The scheduler makes progress or finishes requests with an error; a long run of empty steps is a bug.
      TIDE_CHECK(++idle_steps < 1000);
    } else {
      idle_steps = 0;
      const Tensor logits = model_.forward(step.batch, kv_storage_);
      if (!sampled.empty()) {
        // One sample op over every row of the step, each with its own request's parameters and stream.
        rows.clear();
        history.clear();
        history_starts.assign(1, 0);
        bool any_history = false;
        for (RequestId id : step.sample_ids) {
          const Request& r = *scheduler.find(id);
          const Live& l = live.at(id);
          const SamplingParams& sp = params_of(l);
          rows.push_back(sp.row(l.seed, static_cast<uint64_t>(r.num_output_tokens())));
          if (sp.has_penalties()) {
            any_history = true;
            history.insert(history.end(), l.history.tokens().begin(), l.history.tokens().end());
          }
          history_starts.push_back(static_cast<int32_t>(history.size()));
        }
        SamplingBatch batch{rows, {}, history};
        if (any_history) batch.history_starts = history_starts;
        Tensor ids = backend_->alloc(DType::kI32, Shape{static_cast<int64_t>(sampled.size())});
        backend_->sample(ids, logits, batch);
        backend_->download(ids, sampled.data());
      }
    }
    scheduler.update(step, sampled);

    // New ids: into the penalties' history and out to the caller, then the requests this step finished.
    {
      const std::vector<std::unique_ptr<Request>> done = scheduler.take_finished();
      std::unordered_map<RequestId, const Request*> done_by_id;
      for (const std::unique_ptr<Request>& r : done) done_by_id.emplace(r->id, r.get());
      for (RequestId id : step.sample_ids) {
        const Request* r = scheduler.find(id);
        if (!r) r = done_by_id.at(id);
        Live& l = live.at(id);
        const auto out = r->output_ids();
        for (; l.emitted < r->num_output_tokens(); ++l.emitted) {
          const int32_t token = out[static_cast<size_t>(l.emitted)];
          if (params_of(l).has_penalties()) l.history.add_output(token);
          if (on_token) on_token(l.index, token);
        }
      }
      for (const std::unique_ptr<Request>& r : done) record(*r);
    }
  }
  return results;
}

std::vector<std::vector<float>> Engine::prompt_logits(std::span<const int32_t> prompt, bool all_positions) {
  check_prompt(prompt, 0);
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
  std::vector<KvPoolReport> report;
  for (int p = 0; p < kv_manager_.num_pools(); ++p) {
    const LayerGroup& group = config().groups[static_cast<size_t>(p)];
    report.push_back(KvPoolReport{group.window, group.num_layers(), kv_manager_.pool(p).stats()});
  }
  return report;
}

}  // namespace tide
