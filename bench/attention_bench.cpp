// CudaBackend::attention alone, R7B heads (32 q / 8 kv / 128), one layer of one group:
// (a) prefill of 8192 tokens of one sequence, causal and window 4096: TFLOP/s of useful FLOPs, 4 x heads x
//     head_dim per (query, key) pair the mask allows;
// (b) decode, sequences of 1 token at a context (8 and 32 x 32768 unless --attention-decode says), global: GB/s
//     of the K and V the tokens attend, each read once (the bytes any kernel must read; the kernel may read them more than once).
// With --fp8-kv the cache is FP8 (codes and a 4-byte scale per head's vector, counted in the bytes).
#include <algorithm>
#include <fmt/format.h>

#include <numeric>

#include "backend/cuda/cuda_backend.h"
#include "bench/bench_util.h"
#include "bench/sections.h"

namespace tide::bench {
namespace {

constexpr AttentionShape kShape{32, 8, 128};
constexpr int64_t kKvSize = kShape.num_heads_kv * kShape.head_dim;
constexpr int64_t kQkvSize = (kShape.num_heads + 2 * kShape.num_heads_kv) * kShape.head_dim;

// The paged layout of `num_seqs` sequences, sequence s at positions [start, start + len) of its context,
// each holding its own blocks 0 .. ceil((start + len) / B) - 1 laid out one sequence after another.
struct PagedBatch {
  KvStorage kv;
  AttentionBatch batch;
};

PagedBatch paged_batch(CudaBackend& backend, int64_t num_seqs, int64_t start, int64_t len, bool fp8) {
  const int64_t blocks_per_seq = (start + len + kBlockSize - 1) / kBlockSize;
  std::vector<int32_t> positions, starts{0}, tables(static_cast<size_t>(num_seqs * blocks_per_seq));
  std::vector<int64_t> slots;
  std::iota(tables.begin(), tables.end(), 0);
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int64_t p = start; p < start + len; ++p) {
      positions.push_back(static_cast<int32_t>(p));
      slots.push_back((s * blocks_per_seq + p / kBlockSize) * kBlockSize + p % kBlockSize);
    }
    starts.push_back(static_cast<int32_t>(positions.size()));
  }
  const int64_t num_tokens = num_seqs * len;
  PagedBatch pb;
  const int64_t blocks = num_seqs * blocks_per_seq;
  pb.kv = KvStorage{backend.alloc(fp8 ? DType::kF8E4M3 : DType::kBF16, Shape{blocks, 1, 2 * kBlockSize, kKvSize}), 1,
                    kBlockSize};
  if (fp8) pb.kv.scales = backend.alloc(DType::kF32, Shape{blocks, 1, 2 * kShape.num_heads_kv, kBlockSize});
  fill_kv(backend, pb.kv);
  pb.batch = AttentionBatch{backend.upload(positions.data(), DType::kI32, Shape{num_tokens}),
                            backend.upload(starts.data(), DType::kI32, Shape{num_seqs + 1}),
                            backend.upload(tables.data(), DType::kI32, Shape{num_seqs, blocks_per_seq}),
                            backend.upload(slots.data(), DType::kI64, Shape{num_tokens}), kBlockSize,
                            *std::max_element(positions.begin(), positions.end()), len};
  return pb;
}

// Median milliseconds of `runs` attention calls after one untimed call.
double time_attention(CudaBackend& backend, Tensor& out, const Tensor& qkv, const PagedBatch& pb, int64_t window,
                      int runs) {
  EventTimer timer(backend.stream());
  std::vector<double> ms;
  for (int i = 0; i < 1 + runs; ++i) {
    timer.start();
    backend.attention(out, qkv, pb.kv, 0, pb.batch, kShape, window);
    timer.stop();
    const double t = timer.elapsed_ms();
    if (i > 0) ms.push_back(t);
  }
  return median(ms);
}

void prefill_attention(CudaBackend& backend, const BenchOptions& options, Report& report) {
  const int64_t num_tokens = 8192;
  PagedBatch pb = paged_batch(backend, 1, 0, num_tokens, options.fp8_kv);
  const Tensor qkv = backend.alloc(DType::kBF16, Shape{num_tokens, kQkvSize});
  fill_random(backend, qkv, 0.0f, 1.0f);
  backend.store_kv(pb.kv, 0, qkv, pb.batch.slot_mapping, kShape);  // the batch's own keys, as in a forward
  Tensor out = backend.alloc(DType::kBF16, Shape{num_tokens, kShape.num_heads * kShape.head_dim});
  const int runs = options.timed_runs(5, 2);
  // The default kernel (wgmma), and the mma.sync kernel it replaced (kernels.h); with an FP8 cache the default
  // (the blocks read dequantized into bf16 scratch, the time of that pass included) and the FP8 wgmma kernel
  // on the codes, which serves where the scratch would not fit.
  struct Variant {
    cuda::PrefillAttentionKernel kernel;
    bool dequantize;
    const char* label;
  };
  std::vector<Variant> variants{{cuda::PrefillAttentionKernel::kAuto, true, ""},
                                {cuda::PrefillAttentionKernel::kMmaSync, true, ", mma.sync kernel"}};
  if (options.fp8_kv) variants.push_back({cuda::PrefillAttentionKernel::kAuto, false, ", FP8 kernel on the codes"});
  for (const Variant& v : variants) {
    for (const int64_t window : {int64_t{0}, int64_t{4096}}) {
      backend.set_prefill_attention_kernel(v.kernel);
      backend.set_fp8_kv_prefill_dequantize(v.dequantize);
      const double ms = time_attention(backend, out, qkv, pb, window, runs);
      backend.set_prefill_attention_kernel(cuda::PrefillAttentionKernel::kAuto);
      backend.set_fp8_kv_prefill_dequantize(true);
      const double flops = 4.0 * static_cast<double>(kShape.num_heads * kShape.head_dim) *
                           static_cast<double>(keys_attended_sum(window, 0, num_tokens));
      BenchRow row("attention",
                   fmt::format("attention prefill {}{}{}", window == 0 ? "causal" : "window 4096",
                               options.fp8_kv ? " (FP8 KV)" : "", v.label),
                   "8192 tok, 32/8 heads, d 128");
      row.time_ms = ms;
      row.tok_per_s = static_cast<double>(num_tokens) / (ms * 1e-3);
      row.flops_per_s = flops / (ms * 1e-3);
      row.details = {{"tokens", num_tokens}, {"window", window}, {"flops", flops}, {"runs", runs}};
      report.add(std::move(row));
    }
  }
}

void decode_attention(CudaBackend& backend, const BenchOptions& options, int64_t num_seqs, int64_t context,
                      Report& report) {
  // Token at position C attends keys 0 .. C.
  PagedBatch pb = paged_batch(backend, num_seqs, context, 1, options.fp8_kv);
  const Tensor qkv = backend.alloc(DType::kBF16, Shape{num_seqs, kQkvSize});
  fill_random(backend, qkv, 0.0f, 1.0f);
  backend.store_kv(pb.kv, 0, qkv, pb.batch.slot_mapping, kShape);
  Tensor out = backend.alloc(DType::kBF16, Shape{num_seqs, kShape.num_heads * kShape.head_dim});
  const int runs = options.timed_runs(20, 5);
  const double ms = time_attention(backend, out, qkv, pb, 0, runs);
  // Per key and K or V: bf16 values, or codes and a scale per head.
  const int64_t per_vector_row = options.fp8_kv ? kKvSize + 4 * kShape.num_heads_kv : 2 * kKvSize;
  const int64_t bytes = num_seqs * (context + 1) * 2 * per_vector_row;
  BenchRow row("attention", options.fp8_kv ? "attention decode global (FP8 KV)" : "attention decode global",
               fmt::format("{} seqs x 1 tok, ctx {}", num_seqs, context));
  row.time_ms = ms;
  row.tok_per_s = static_cast<double>(num_seqs) / (ms * 1e-3);
  row.bytes_per_s = static_cast<double>(bytes) / (ms * 1e-3);
  row.details = {{"kv_bytes_read", bytes}, {"runs", runs}};
  report.add(std::move(row));
}

}  // namespace

void run_attention(const BenchOptions& options, Report& report) {
  CudaBackend backend;
  try {
    prefill_attention(backend, options, report);
  } catch (const std::exception& e) {
    report.add(BenchRow("attention", "attention prefill", "", fmt::format("error: {}", e.what())));
  }
  for (const auto& [num_seqs, context] : options.attention_decode) {
    try {
      decode_attention(backend, options, num_seqs, context, report);
    } catch (const std::exception& e) {
      report.add(BenchRow("attention", "attention decode", "", fmt::format("error: {}", e.what())));
    }
  }
}

}  // namespace tide::bench
