// The sections of tide_bench, each a function that measures and adds rows to the report. Every section
// builds its own CudaBackend and drops it at the end, so the caching allocator's freed blocks (a big KV
// cache of one decode point) go back to the device before the next section allocates. Only the synthetic
// weights (their own backend, alive for the whole run) are shared.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/report.h"
#include "model/config.h"
#include "model/weights.h"

namespace tide::bench {

inline constexpr int64_t kBlockSize = 16;
inline constexpr int64_t kMemoryMargin = int64_t{4} << 30;  // kept free for activations and cuBLASLt

struct BenchOptions {
  bool quick = false;
  bool fp8 = false;  // the linear layers' weights in FP8 E4M3 with row scales (the model runs its FP8 path)
  bool fp8_kv = false;  // decode: an FP8 KV cache (--kv-cache-dtype fp8)
  bool ablate = false;  // decode: the first point again without each op group (AblationBackend)
  std::string trace_prefix;  // decode: a CUPTI kernel timeline of each point, PREFIX-B<batch>-C<context>[-k<drafts>].csv
  std::vector<int64_t> decode_batches{1, 8, 32, 128};
  std::vector<int64_t> decode_contexts{1024, 32768};
  std::vector<int64_t> prefill_lengths{2048, 8192, 32768};
  int64_t max_prefill_chunk = 8192;
  std::vector<int64_t> linear_tokens{1, 8, 16};
  // attention: decode points (sequences, context), one token per sequence attending keys 0 .. context.
  std::vector<std::pair<int64_t, int64_t>> attention_decode{{8, 32768}, {32, 32768}};
  std::vector<int64_t> verify_tokens;  // decode: also verify steps of 1 + k tokens per sequence, for each k
  int fp8_variant = -1;  // the FP8 small-batch matmul's shape (CudaBackend::set_fp8_small_matmul_variant)
  // decode: the most tokens an FP8 matmul runs on the wgmma kernel (-1: the backend's default;
  // CudaBackend::set_fp8_wgmma_matmul_max_tokens)
  int64_t fp8_wgmma_max_tokens = -1;
  // decode: whether the wgmma FP8 matmuls of the two streams' chains take their stream's share of the SMs
  // (CudaBackend::set_fp8_wgmma_stream_shares)
  bool fp8_wgmma_stream_shares = true;
  // decode and prefill: the most tokens a bf16 matmul runs on tide's small-batch kernel (-1: the backend's
  // rule; CudaBackend::set_bf16_small_matmul_max_tokens)
  int64_t bf16_small_max_tokens = -1;
  // prefill over an FP8 cache (fp8_kv): the FP8 attention kernels on the codes instead of the blocks dequantized
  // into bf16 scratch (CudaBackend::set_fp8_kv_prefill_dequantize), for A/B runs
  bool fp8_kv_codes = false;
  // decode, linear and prefill: cuBLASLt's FP8 matmuls promote their sums to f32 as they go instead of the
  // engine's fast accumulation (CudaBackend::set_fp8_fast_accum), for A/B runs
  bool fp8_exact_accum = false;
  bool baselines = true;  // decode: also each point without PDL, without overlap and with cuBLASLt's FP8
  std::vector<std::string> sections{"ceilings", "linear", "decode", "prefill", "attention", "sampling"};

  int timed_runs(int full, int quick_runs) const { return quick ? quick_runs : full; }
  bool runs(const std::string& section) const {
    return std::find(sections.begin(), sections.end(), section) != sections.end();
  }
};

struct BenchModel {
  const ModelConfig& config;
  const Cohere2Weights& weights;
};

// Device-to-device copy bandwidth and bf16 GEMM throughput; sets the report's ceilings.
void run_ceilings(const BenchOptions& options, Report& report);
// The four linear layers of every layer at decode batch sizes, each kind over all layers (far past L2):
// weight bytes read per second; FP8 weights through the small-batch kernel and through cuBLASLt.
void run_linear(const BenchModel& model, const BenchOptions& options, Report& report);
// Decode steps of B sequences of 1 token at context C over a randomly filled paged KV cache.
void run_decode(const BenchModel& model, const BenchOptions& options, Report& report);
// One prompt of each length through the model in chunks, timed as a whole.
void run_prefill(const BenchModel& model, const BenchOptions& options, Report& report);
// CudaBackend::attention alone: prefill 8192 tokens (causal and window 4096), decode batch 32 at 32768.
void run_attention(const BenchOptions& options, Report& report);
// CudaBackend::sample at V = 256000 for R = 1, 8, 32, 128: all filters, top-p alone, greedy.
void run_sampling(const BenchOptions& options, Report& report);

}  // namespace tide::bench
