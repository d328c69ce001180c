// Prefill: one sequence, one prompt of each length, in chunks of at most max_prefill_chunk tokens (one
// ForwardBatch per chunk, logits for the prompt's last token only, as Engine does), timed from the first
// chunk to the last. FLOPs counted: 2 x layer matmul parameters x tokens, attention 4 x heads x head_dim per
// (query, key) pair the layer's mask allows, and the logits matmul of one row. Then the linear layers alone
// for one chunk: every layer's four matmuls (qkv, o, gate_up, down) at the chunk's token count, as the
// forward pass runs them, FLOPs 2 x parameters x tokens; and the elementwise ops between them (ops_point).
// With --trace, one more run of each prompt under CUPTI writes its kernels to PREFIX-prefill-<tokens>.csv.
#include <fmt/format.h>

#include <memory>
#include <numeric>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "bench/bench_util.h"
#include "bench/kernel_trace.h"
#include "bench/kv_setup.h"
#include "bench/sections.h"
#include "bench/synthetic_model.h"
#include "model/cohere2.h"

namespace tide::bench {
namespace {

double prefill_flops(const ModelConfig& c, int64_t num_tokens) {
  double attention = 0;
  for (const LayerSpec& layer : c.layers) {
    attention += 4.0 * static_cast<double>(c.num_heads * c.head_dim) *
                 static_cast<double>(keys_attended_sum(layer.window, 0, num_tokens));
  }
  const double linear = 2.0 * static_cast<double>(linear_params(c)) * static_cast<double>(num_tokens);
  const double logits = 2.0 * static_cast<double>(c.vocab_size * c.hidden_size);
  return linear + attention + logits;
}

// Runs a prompt of `num_tokens` through the model in chunks; returns the milliseconds from the first
// chunk's start to the last chunk's end on the backend's stream. Leaves the manager as it found it.
double run_prompt(const Cohere2Model& model, KvCacheManager& manager, std::vector<KvStorage>& kv, int64_t num_tokens,
                  int64_t chunk, EventTimer& timer) {
  const ModelConfig& c = model.config();
  SequenceKv seq;
  timer.start();
  for (int64_t begin = 0; begin < num_tokens; begin += chunk) {
    const int64_t n = std::min(chunk, num_tokens - begin);
    manager.append(seq, n);
    ForwardBatch batch;
    for (int64_t i = 0; i < n; ++i) batch.token_ids.push_back(dummy_token(c, 0, begin + i));
    batch.seqs.push_back(forward_sequence(seq, n));
    if (begin + n == num_tokens) batch.logit_indices.push_back(static_cast<int32_t>(n - 1));
    const Tensor logits = model.forward(batch, kv);
    manager.commit(seq, batch.token_ids);
  }
  timer.stop();
  const double ms = timer.elapsed_ms();
  manager.free(seq);
  return ms;
}

void prefill_point(const Cohere2Model& model, CudaBackend& backend, const BenchOptions& options, int64_t num_tokens,
                   Report& report) {
  const ModelConfig& c = model.config();
  const int64_t chunk = std::min(num_tokens, options.max_prefill_chunk);
  const int runs = options.timed_runs(3, 1);
  BenchRow row("prefill", fmt::format("prefill {} tokens", num_tokens),
               fmt::format("1 seq, chunks of {}", chunk));
  row.fp8 = options.fp8;  // FP8 models: compared to the FP8 GEMM ceiling
  if (num_tokens > c.max_position_embeddings) {
    row.note = fmt::format("skipped: beyond the model's {} positions", c.max_position_embeddings);
    report.add(std::move(row));
    return;
  }
  const KvArenaSpec arena = arena_spec(c, kBlockSize, 1, num_tokens, chunk);
  const int64_t kv_bytes = kv_cache_bytes(c, kBlockSize, arena, options.fp8_kv);
  if (kv_bytes + kMemoryMargin > free_device_bytes()) {
    row.note = "skipped: does not fit";
    report.add(std::move(row));
    return;
  }
  KvCacheManager manager(kBlockSize, c.group_windows(), arena, /*enable_prefix_caching=*/false);
  std::vector<KvStorage> kv = model.allocate_kv(kBlockSize, arena.num_blocks,
                                                options.fp8_kv ? KvCacheDtype::kFp8 : KvCacheDtype::kAuto);
  EventTimer timer(backend.stream());

  // Warm-up: one chunk of the timed chunk shape (cuBLASLt algorithm choice, allocator caches).
  run_prompt(model, manager, kv, chunk, chunk, timer);
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) ms.push_back(run_prompt(model, manager, kv, num_tokens, chunk, timer));

  if (!options.trace_prefix.empty()) {
    // One more run under CUPTI: every kernel of the prompt, for where its time goes.
    KernelTrace tracer;
    run_prompt(model, manager, kv, num_tokens, chunk, timer);
    const std::string path = fmt::format("{}-prefill-{}.csv", options.trace_prefix, num_tokens);
    write_trace_csv(path, tracer.finish());
    row.details["trace"] = path;
  }

  const double t = median(ms);
  const double flops = prefill_flops(c, num_tokens);
  row.time_ms = t;
  row.tok_per_s = static_cast<double>(num_tokens) / (t * 1e-3);
  row.flops_per_s = flops / (t * 1e-3);
  row.details = {{"tokens", num_tokens}, {"chunk", chunk}, {"flops", flops}, {"runs", runs},
                 {"kv_cache_bytes", kv_bytes}, {"fp8_kv", options.fp8_kv}};
  report.add(std::move(row));
}

// The four matmuls of every layer on `num_tokens` rows of random activations (FP8 models: the activations
// quantized once beforehand, the matmuls alone timed).
void linear_point(const BenchModel& m, CudaBackend& backend, const BenchOptions& options, int64_t num_tokens,
                  Report& report) {
  const ModelConfig& c = m.config;
  const Cohere2Weights& w = m.weights;
  BenchRow row("prefill", fmt::format("linear layers, {} tokens", num_tokens),
               fmt::format("{} layers x (qkv, o, gate_up, down)", c.num_layers));
  row.fp8 = options.fp8;
  Tensor x = backend.alloc(DType::kBF16, Shape{num_tokens, c.hidden_size});
  Tensor qkv = backend.alloc(DType::kBF16, Shape{num_tokens, c.qkv_size()});
  Tensor attn = backend.alloc(DType::kBF16, Shape{num_tokens, c.q_size()});
  Tensor out = backend.alloc(DType::kBF16, Shape{num_tokens, c.hidden_size});
  Tensor gate_up = backend.alloc(DType::kBF16, Shape{num_tokens, 2 * c.intermediate_size});
  Tensor act = backend.alloc(DType::kBF16, Shape{num_tokens, c.intermediate_size});
  for (const Tensor* t : {&x, &attn, &act}) fill_random(backend, *t, 0.0f, 1.0f);
  // FP8 inputs: codes and per-token scales of x, attn and act.
  struct Quantized {
    Tensor codes, scales;
  };
  auto quantized = [&](const Tensor& t) {
    if (!options.fp8) return Quantized{};
    Quantized q{backend.alloc(DType::kF8E4M3, t.shape), backend.alloc(DType::kF32, Shape{t.dim(0)})};
    backend.quantize_fp8(q.codes, q.scales, t);
    return q;
  };
  const Quantized x8 = quantized(x), attn8 = quantized(attn), act8 = quantized(act);
  auto project = [&](Tensor o, const Tensor& in, const Quantized& in8, const Linear& l) {
    if (l.fp8()) {
      backend.matmul_fp8(o, in8.codes, in8.scales, l.weight, l.scale, 1.0f);
    } else {
      backend.matmul(o, in, l.weight, 1.0f);
    }
  };
  EventTimer timer(backend.stream());
  auto all_layers = [&] {
    for (const LayerWeights& lw : w.layers) {
      project(qkv, x, x8, lw.qkv);
      project(out, attn, attn8, lw.o);
      project(gate_up, x, x8, lw.gate_up);
      project(out, act, act8, lw.down);
    }
  };
  all_layers();  // warm-up: algorithm choice
  std::vector<double> ms;
  for (int i = 0; i < options.timed_runs(5, 2); ++i) {
    timer.start();
    all_layers();
    timer.stop();
    ms.push_back(timer.elapsed_ms());
  }
  const double t = median(ms);
  const double flops = 2.0 * static_cast<double>(linear_params(c)) * static_cast<double>(num_tokens);
  row.time_ms = t;
  row.tok_per_s = static_cast<double>(num_tokens) / (t * 1e-3);
  row.flops_per_s = flops / (t * 1e-3);
  row.details = {{"tokens", num_tokens}, {"flops", flops}, {"runs", ms.size()}};
  report.add(std::move(row));
}

// The elementwise ops around a prefill chunk's matmuls, each alone at `num_tokens` rows, in the forms the model
// runs (FP8 models: those that quantize for the next FP8 matmul): the SwiGLU that feeds down, the attention
// output's quantization for o (FP8 only), the residual adds with the next layer's norm, and RoPE with the KV
// store (a bf16 cache). Each row: the time of one call (median over bursts of 10) and the bytes it reads and
// writes per second.
void ops_point(const BenchModel& m, CudaBackend& backend, const BenchOptions& options, int64_t num_tokens,
               Report& report) {
  const ModelConfig& c = m.config;
  const int64_t t = num_tokens, hidden = c.hidden_size, inter = c.intermediate_size, q = c.q_size();
  Tensor gate_up = backend.alloc(DType::kBF16, Shape{t, 2 * inter});
  Tensor act = backend.alloc(DType::kBF16, Shape{t, inter});
  Tensor attn = backend.alloc(DType::kBF16, Shape{t, q});
  Tensor h = backend.alloc(DType::kBF16, Shape{t, hidden});
  Tensor a = backend.alloc(DType::kBF16, Shape{t, hidden});
  Tensor b = backend.alloc(DType::kBF16, Shape{t, hidden});
  Tensor x = backend.alloc(DType::kBF16, Shape{t, hidden});
  for (const Tensor* r : {&gate_up, &attn, &h, &a, &b}) fill_random(backend, *r, 0.0f, 1.0f);
  Tensor scales = backend.alloc(DType::kF32, Shape{t});
  const auto codes_of = [&](int64_t cols) { return backend.alloc(DType::kF8E4M3, Shape{t, cols}); };
  const Tensor& norm = m.weights.layers.front().input_norm;
  const float eps = static_cast<float>(c.layer_norm_eps);
  EventTimer timer(backend.stream());
  const auto measure = [&](const std::string& what, const std::string& shape, int64_t bytes, const auto& op) {
    constexpr int kBurst = 10;
    op();  // warm-up
    std::vector<double> ms;
    for (int i = 0; i < options.timed_runs(5, 3); ++i) {
      timer.start();
      for (int k = 0; k < kBurst; ++k) op();
      timer.stop();
      ms.push_back(timer.elapsed_ms() / kBurst);
    }
    BenchRow row("prefill", what, shape);
    row.time_ms = median(ms);
    row.tok_per_s = static_cast<double>(t) / (*row.time_ms * 1e-3);
    row.bytes_per_s = static_cast<double>(bytes) / (*row.time_ms * 1e-3);
    row.details = {{"tokens", t}, {"bytes", bytes}, {"calls", kBurst * ms.size()}};
    report.add(std::move(row));
  };
  const int64_t bf = 2;  // bytes of a bf16 value
  if (options.fp8) {
    const Tensor act8 = codes_of(inter), attn8 = codes_of(q), x8 = codes_of(hidden);
    measure(fmt::format("silu_mul_fp8, {} tokens", t), fmt::format("[{}, {}] -> FP8 [{}, {}]", t, 2 * inter, t, inter),
            t * (2 * inter * bf + inter + 4), [&] { backend.silu_mul_fp8(act8, scales, gate_up, act); });
    measure(fmt::format("quantize_fp8, {} tokens", t), fmt::format("[{}, {}] -> FP8", t, q), t * (q * bf + q + 4),
            [&] { backend.quantize_fp8(attn8, scales, attn); });
    measure(fmt::format("residual_layer_norm_fp8, {} tokens", t), fmt::format("3 x [{}, {}] -> h, FP8", t, hidden),
            t * (4 * hidden * bf + hidden + 4),
            [&] { backend.residual_layer_norm_fp8(h, a, b, x8, scales, norm, eps, x); });
  } else {
    measure(fmt::format("silu_mul, {} tokens", t), fmt::format("[{}, {}] -> [{}, {}]", t, 2 * inter, t, inter),
            t * 3 * inter * bf, [&] { backend.silu_mul(act, gate_up); });
    measure(fmt::format("residual_layer_norm, {} tokens", t), fmt::format("3 x [{}, {}] -> h, x", t, hidden),
            t * 5 * hidden * bf, [&] { backend.residual_layer_norm(h, a, b, x, norm, eps); });
  }
  // RoPE with the KV store, the sliding layers' form, into a bf16 cache holding the t tokens' slots: reads the
  // qkv rows, writes the rotated q and k heads back and k and v into the cache.
  const AttentionShape shape{c.num_heads, c.num_heads_kv, c.head_dim};
  const int64_t kv_size = c.num_heads_kv * c.head_dim, blocks = (t + kBlockSize - 1) / kBlockSize;
  Tensor qkv = backend.alloc(DType::kBF16, Shape{t, c.qkv_size()});
  fill_random(backend, qkv, 0.0f, 1.0f);
  KvStorage kv{backend.alloc(DType::kBF16, Shape{blocks, 1, 2 * kBlockSize, kv_size}), 1, kBlockSize};
  std::vector<int32_t> pos(static_cast<size_t>(t));
  std::vector<int64_t> slots(static_cast<size_t>(t));
  std::iota(pos.begin(), pos.end(), 0);
  std::iota(slots.begin(), slots.end(), 0);
  const Tensor positions = backend.upload(pos.data(), DType::kI32, Shape{t});
  const Tensor slot_mapping = backend.upload(slots.data(), DType::kI64, Shape{t});
  const std::vector<float> freq = c.rope_inv_freq();
  const Tensor inv_freq = backend.upload(freq.data(), DType::kF32, Shape{std::ssize(freq)});
  measure(fmt::format("rope_store_kv, {} tokens", t),
          fmt::format("[{}, {}] -> q, k in place, k, v cached", t, c.qkv_size()),
          t * (c.qkv_size() + q + kv_size + 2 * kv_size) * bf,
          [&] { backend.rope_store_kv(kv, 0, qkv, positions, inv_freq, slot_mapping, shape); });
}

}  // namespace

void run_prefill(const BenchModel& m, const BenchOptions& options, Report& report) {
  // One backend for all lengths: a single sequence's KV and one chunk's activations are small next to the
  // weights; dropping the backend afterwards returns its cached blocks.
  auto backend = std::make_unique<CudaBackend>();
  backend->set_fp8_fast_accum(!options.fp8_exact_accum);
  if (options.bf16_small_max_tokens >= 0) backend->set_bf16_small_matmul_max_tokens(options.bf16_small_max_tokens);
  backend->set_fp8_kv_prefill_dequantize(!options.fp8_kv_codes);
  const Cohere2Model model(m.config, m.weights, *backend);
  for (int64_t num_tokens : options.prefill_lengths) {
    try {
      prefill_point(model, *backend, options, num_tokens, report);
    } catch (const std::exception& e) {
      report.add(BenchRow("prefill", fmt::format("prefill {} tokens", num_tokens),
                          "", fmt::format("error: {}", e.what())));
    }
  }
  const int64_t chunk = options.max_prefill_chunk;
  try {
    linear_point(m, *backend, options, chunk, report);
  } catch (const std::exception& e) {
    report.add(BenchRow("prefill", fmt::format("linear layers, {} tokens", chunk), "", fmt::format("error: {}", e.what())));
  }
  try {
    ops_point(m, *backend, options, chunk, report);
  } catch (const std::exception& e) {
    report.add(BenchRow("prefill", fmt::format("elementwise ops, {} tokens", chunk), "", fmt::format("error: {}", e.what())));
  }
}

}  // namespace tide::bench
