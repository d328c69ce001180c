// Decode: B sequences at context C, one new token each per step, through Cohere2Model::forward over the
// paged KV cache. The context is not prefilled through the model (too slow for a benchmark): the block
// tables come from KvCacheManager::append + commit with dummy tokens and the KV storage is filled with
// random bf16 once. Achieved bandwidth counts the bytes a step must read at least: every weight once plus,
// per sequence and layer, the K and V of the keys its token attends.
#include <fmt/format.h>

#include <chrono>

#include <memory>
#include <set>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "bench/ablation_backend.h"
#include "bench/bench_util.h"
#include "bench/kernel_trace.h"
#include "bench/kv_setup.h"
#include "bench/sections.h"
#include "bench/synthetic_model.h"
#include "model/cohere2.h"

namespace tide::bench {
namespace {

constexpr int kWarmupSteps = 3;
constexpr int kTracedSteps = 3;
constexpr int64_t kFillChunk = kBlockSize;  // fake prefill step: keeps sliding pools at window + one block

// KV bytes one decode step reads: each sequence's token at `pos` reads the K and V of the keys it attends.
int64_t kv_bytes_read(const ModelConfig& c, int64_t num_seqs, int64_t pos, bool fp8) {
  int64_t keys = 0;
  for (const LayerSpec& layer : c.layers) keys += keys_attended(layer.window, pos);
  return num_seqs * keys * 2 * (fp8 ? c.kv_size() + 4 * c.num_heads_kv : 2 * c.kv_size());
}

// The A/B comparisons of a decode point: the same steps with one of tide's optimizations turned off.
enum class Baseline {
  kNone,
  kCublasFp8,  // FP8 matmuls through cuBLASLt only (against tide's small-batch and wgmma kernels)
  kNoPdl,      // kernels launched without programmatic dependent launch (launch.cuh)
  kNoOverlap,  // the attention and MLP chains one after the other (Backend::side_begin)
};

// What a baseline's rows add to their label.
const char* baseline_suffix(Baseline baseline) {
  switch (baseline) {
    case Baseline::kCublasFp8: return " cuBLASLt";
    case Baseline::kNoPdl: return " no PDL";
    case Baseline::kNoOverlap: return " no overlap";
    case Baseline::kNone: break;
  }
  return "";
}

// skip: op groups left out of the step (AblationBackend; the difference to the full step is their cost).
// draft > 0: verify steps of speculative decoding instead, each sequence computing 1 + draft tokens with a
// logits row each (its newest token and the drafts after it).
void decode_point(const BenchModel& m, const BenchOptions& options, int64_t num_seqs, int64_t context,
                  Baseline baseline, const std::set<std::string>& skip, Report& report, int64_t draft = 0) {
  const ModelConfig& c = m.config;
  const int runs = options.timed_runs(20, 5);
  const int64_t num_steps = kWarmupSteps + runs;
  // --trace: a few more steps after the timed ones, under CUPTI (every point but the baselines and ablations;
  // verify points too).
  const bool trace = !options.trace_prefix.empty() && baseline == Baseline::kNone && skip.empty();
  const int64_t all_steps = num_steps + (trace ? kTracedSteps : 0);
  const int64_t per_seq = 1 + draft;  // tokens each sequence computes per step
  std::string label = draft > 0 ? fmt::format("verify B={} C={} k={}", num_seqs, context, draft)
                                : fmt::format("decode B={} C={}{}", num_seqs, context, baseline_suffix(baseline));
  for (const std::string& group : skip) label += " -" + group;
  BenchRow row("decode", label,
               fmt::format("{} seqs x {} token{}, ctx {}", num_seqs, per_seq, per_seq > 1 ? "s" : "", context));
  if (context + all_steps * per_seq > c.max_position_embeddings) {
    row.note = fmt::format("skipped: context beyond the model's {} positions", c.max_position_embeddings);
    report.add(std::move(row));
    return;
  }

  // The pools hold every position the steps will write: C + warm-up, timed and traced steps.
  const KvArenaSpec arena = arena_spec(c, kBlockSize, num_seqs, context + all_steps * per_seq, kFillChunk);
  const int64_t kv_bytes = kv_cache_bytes(c, kBlockSize, arena, options.fp8_kv);
  const int64_t free_bytes = free_device_bytes();
  row.details = {{"batch", num_seqs}, {"context", context}, {"kv_cache_bytes", kv_bytes}, {"free_bytes", free_bytes}};
  if (kv_bytes + kMemoryMargin > free_bytes) {
    row.note = fmt::format("skipped: does not fit ({:.1f} GiB of KV, {:.1f} GiB free, 4 GiB margin)",
                           static_cast<double>(kv_bytes) / kGiB, static_cast<double>(free_bytes) / kGiB);
    report.add(std::move(row));
    return;
  }

  // Fresh backend per point: its allocator's cached blocks (this point's KV) are freed with it.
  auto backend = std::make_unique<CudaBackend>();
  backend->set_fp8_fast_accum(!options.fp8_exact_accum);
  if (baseline == Baseline::kCublasFp8) {
    backend->set_fp8_small_matmul_max_tokens(0);
    backend->set_fp8_wgmma_matmul_max_tokens(0);
  }
  backend->set_fp8_small_matmul_variant(options.fp8_variant);
  if (options.bf16_small_max_tokens >= 0) backend->set_bf16_small_matmul_max_tokens(options.bf16_small_max_tokens);
  backend->set_fp8_wgmma_stream_shares(options.fp8_wgmma_stream_shares);
  if (options.fp8_wgmma_max_tokens >= 0 && baseline != Baseline::kCublasFp8) {
    backend->set_fp8_wgmma_matmul_max_tokens(options.fp8_wgmma_max_tokens);
  }
  // Process-wide: set for this point, back on when it ends (also by an exception).
  CudaBackend::set_programmatic_launch(baseline != Baseline::kNoPdl);
  struct PdlBackOn {
    ~PdlBackOn() { CudaBackend::set_programmatic_launch(true); }
  } pdl_back_on;
  AblationBackend ablation(*backend, skip, /*overlap=*/baseline != Baseline::kNoOverlap);
  const Cohere2Model model(c, m.weights, ablation);
  KvCacheManager manager(kBlockSize, c.group_windows(), arena, /*enable_prefix_caching=*/false);
  std::vector<SequenceKv> seqs(static_cast<size_t>(num_seqs));
  for (int64_t s = 0; s < num_seqs; ++s) fake_prefill(c, manager, seqs[static_cast<size_t>(s)], s, context, kFillChunk);
  std::vector<KvStorage> kv = model.allocate_kv(kBlockSize, arena.num_blocks,
                                                options.fp8_kv ? KvCacheDtype::kFp8 : KvCacheDtype::kAuto);
  for (const KvStorage& storage : kv) fill_kv(*backend, storage);
  TIDE_CUDA_CHECK(cudaStreamSynchronize(backend->stream()));

  EventTimer timer(backend->stream());
  std::vector<double> ms, enqueue_us, wall_ms;
  int64_t kv_read_total = 0;
  std::unique_ptr<KernelTrace> tracer;
  for (int64_t step = 0; step < all_steps; ++step) {
    if (trace && step == num_steps) tracer = std::make_unique<KernelTrace>();
    const int64_t pos = seqs.front().num_computed();
    ForwardBatch batch;
    for (int64_t s = 0; s < num_seqs; ++s) {
      SequenceKv& seq = seqs[static_cast<size_t>(s)];
      manager.append(seq, per_seq);
      for (int64_t i = 0; i < per_seq; ++i) {
        batch.logit_indices.push_back(static_cast<int32_t>(batch.token_ids.size()));
        batch.token_ids.push_back(dummy_token(c, s, pos + i));
      }
      batch.seqs.push_back(forward_sequence(seq, per_seq));
    }
    // Host time to queue the step (metadata, uploads, graph launch) and the wall time until it is done: a
    // host that queues in far less than the GPU runs leaves the GPU no gap to fill.
    const auto begin = std::chrono::steady_clock::now();
    timer.start();
    const Tensor logits = model.forward(batch, kv);
    timer.stop();
    const auto queued = std::chrono::steady_clock::now();
    const double t = timer.elapsed_ms();
    const auto done = std::chrono::steady_clock::now();
    if (step >= kWarmupSteps && step < num_steps) {
      ms.push_back(t);
      enqueue_us.push_back(std::chrono::duration<double, std::micro>(queued - begin).count());
      wall_ms.push_back(std::chrono::duration<double, std::milli>(done - begin).count());
      kv_read_total += kv_bytes_read(c, num_seqs, pos, options.fp8_kv);
    }
    for (int64_t s = 0; s < num_seqs; ++s) {
      const std::span<const int32_t> tokens(batch.token_ids);
      manager.commit(seqs[static_cast<size_t>(s)],
                     tokens.subspan(static_cast<size_t>(s * per_seq), static_cast<size_t>(per_seq)));
    }
  }

  if (tracer) {
    const std::string path = draft > 0 ? fmt::format("{}-B{}-C{}-k{}.csv", options.trace_prefix, num_seqs, context, draft)
                                       : fmt::format("{}-B{}-C{}.csv", options.trace_prefix, num_seqs, context);
    write_trace_csv(path, tracer->finish());
    row.details["trace"] = path;
  }

  const double step_ms = median(ms);
  const int64_t weights = weight_bytes(c, options.fp8);
  const int64_t kv_read = kv_read_total / runs;
  row.time_ms = step_ms;
  row.tok_per_s = static_cast<double>(num_seqs) / (step_ms * 1e-3);
  row.bytes_per_s = static_cast<double>(weights + kv_read) / (step_ms * 1e-3);
  row.details["weight_bytes"] = weights;
  row.details["kv_bytes_read_per_step"] = kv_read;
  row.details["step_ms_min"] = *std::min_element(ms.begin(), ms.end());
  row.details["step_ms_max"] = *std::max_element(ms.begin(), ms.end());
  row.details["timed_steps"] = runs;
  row.details["host_enqueue_us"] = median(enqueue_us);
  row.details["wall_step_ms"] = median(wall_ms);
  report.add(std::move(row));
}

}  // namespace

void run_decode(const BenchModel& model, const BenchOptions& options, Report& report) {
  for (int64_t context : options.decode_contexts) {
    for (int64_t batch : options.decode_batches) {
      // Small batches: also without PDL, without the two chains' overlap and, in FP8, with cuBLASLt for every
      // matmul, the same steps.
      std::vector<Baseline> baselines{Baseline::kNone};
      if (batch <= 16 && options.baselines) baselines.insert(baselines.end(), {Baseline::kNoPdl, Baseline::kNoOverlap});
      if (options.fp8 && batch <= cuda::kFp8WgmmaMatmulMaxTokens && options.baselines) {
        baselines.push_back(Baseline::kCublasFp8);
      }
      for (Baseline baseline : baselines) {
        try {
          decode_point(model, options, batch, context, baseline, {}, report);
        } catch (const std::exception& e) {
          report.add(BenchRow("decode", fmt::format("decode B={} C={}", batch, context),
                              "", fmt::format("error: {}", e.what())));
        }
      }
      // --verify-tokens: verify steps of 1 + k tokens per sequence, against the decode step above.
      for (int64_t k : options.verify_tokens) {
        try {
          decode_point(model, options, batch, context, Baseline::kNone, {}, report, k);
        } catch (const std::exception& e) {
          report.add(BenchRow("decode", fmt::format("verify B={} C={} k={}", batch, context, k), "",
                              fmt::format("error: {}", e.what())));
        }
      }
    }
  }
  // --ablate: the first point again without each op group in turn.
  if (options.ablate && !options.decode_contexts.empty() && !options.decode_batches.empty()) {
    for (const std::string& group : ablation_groups()) {
      try {
        decode_point(model, options, options.decode_batches.front(), options.decode_contexts.front(), Baseline::kNone,
                     {group}, report);
      } catch (const std::exception& e) {
        report.add(BenchRow("decode", "decode -" + group, "", fmt::format("error: {}", e.what())));
      }
    }
  }
}

}  // namespace tide::bench
