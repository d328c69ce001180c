// CudaBackend: the Backend ops on one NVIDIA GPU (built for Hopper, sm_90a). Weights, activations and the KV
// cache are bf16 with f32 accumulation; logits are f32. All work is queued on one stream; download()
// synchronizes, uploads go through pinned staging buffers and do not. Device memory comes from a caching
// allocator (freed blocks are kept for reuse by size, and released when a new allocation would not fit), the
// host tier from pinned memory.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/kernels.h"

namespace tide {

class CudaBackend final : public Backend {
 public:
  // Uses device `device`. Throws tide::Error when there is no usable CUDA device.
  explicit CudaBackend(int device = 0);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  // Whether a CUDA device is present (for tests and `--device` defaults). Does not throw.
  static bool available();

  std::string name() const override { return "cuda"; }

  Tensor alloc(DType dtype, Shape shape) override;
  Tensor alloc_uninitialized(DType dtype, Shape shape) override { return alloc_scratch(dtype, std::move(shape)); }
  Tensor alloc_host(DType dtype, Shape shape) override;
  // Host data is copied (and converted) by a few host threads into one of kStagingSlots pinned buffers, whose
  // transfer is queued without waiting, so reading the next part overlaps the transfer of the last.
  void upload_into_as(Tensor t, const void* host, DType host_dtype) override;
  void upload_into(Tensor t, const void* host) override;
  void download(const Tensor& t, void* host) override;
  DType weight_dtype() const override { return DType::kBF16; }
  DType activation_dtype() const override { return DType::kBF16; }
  // Memory the caching allocator holds for reuse counts as free.
  std::optional<MemoryInfo> memory_info() const override;
  void bind_thread() override;

  void embedding(Tensor out, const Tensor& table, const Tensor& ids) override;
  void gather_rows(Tensor out, const Tensor& x, const Tensor& rows) override;
  void layer_norm(Tensor out, const Tensor& x, const Tensor& weight, float eps) override;
  void residual_layer_norm(Tensor h, const Tensor& a, const Tensor& b, Tensor out, const Tensor& weight,
                           float eps) override;
  void matmul(Tensor out, const Tensor& x, const Tensor& w, float alpha) override;
  void rope(Tensor qkv, const Tensor& positions, const Tensor& inv_freq, int64_t num_rope_heads) override;
  void store_kv(KvStorage& kv, int64_t layer, const Tensor& qkv, const Tensor& slot_mapping,
                const AttentionShape& shape) override;
  void rope_store_kv(KvStorage& kv, int64_t layer, Tensor qkv, const Tensor& positions, const Tensor& inv_freq,
                     const Tensor& slot_mapping, const AttentionShape& shape) override;
  void attention(Tensor out, const Tensor& qkv, const KvStorage& kv, int64_t layer, const AttentionBatch& batch,
                 const AttentionShape& shape, int64_t window) override;
  void silu_mul(Tensor out, const Tensor& gate_up) override;
  void add(Tensor out, const Tensor& a, const Tensor& b) override;
  void copy(Tensor out, const Tensor& x) override;
  // t: BF16 or F32.
  void fill_uniform(Tensor t, float center, float amplitude, uint64_t seed) override;
  bool supports_fp8() const override { return true; }
  // FP8 KV storage: the quantizing store (kv_fp8.cu) and the tensor-core attention (head_dim 64, 128, 256).
  bool supports_fp8_kv(int64_t head_dim) const override;
  // x: BF16 rows up to kMaxRowElements in registers (fp8.cu's per-token kernel); longer BF16 rows and F32 rows
  // (weights quantized at load) read twice from memory, with the same arithmetic.
  void quantize_fp8(Tensor out8, Tensor scales, const Tensor& x) override;
  // The fused kernels: the bf16 intermediate is never written (scratch is unused).
  void layer_norm_fp8(Tensor out8, Tensor scales, const Tensor& x, const Tensor& weight, float eps,
                      Tensor scratch) override;
  void residual_layer_norm_fp8(Tensor h, const Tensor& a, const Tensor& b, Tensor out8, Tensor scales,
                               const Tensor& weight, float eps, Tensor scratch) override;
  void silu_mul_fp8(Tensor out8, Tensor scales, const Tensor& gate_up, Tensor scratch) override;
  // Up to kFp8SmallMatmulMaxTokens (16) tokens run tide's small-batch kernel (fp8_small_matmul.cu), more
  // go to cuBLASLt.
  void matmul_fp8(Tensor out, const Tensor& x8, const Tensor& x_scales, const Tensor& w8, const Tensor& w_scales,
                  float alpha) override;
  // The per-row arrays travel in one asynchronous copy from pinned staging into a device buffer, both kept
  // and grown as needed (a CUDA graph can capture the copy and the kernel once their capacity suffices).
  void sample(Tensor out_ids, Tensor logits, const SamplingBatch& batch) override;
  bool supports_draft_sampling() const override { return true; }
  void sample_with_drafts(Tensor out_ids, Tensor logits, const SamplingBatch& batch, const DraftSampling& drafts) override;
  // Chosen ids are not checked on the host (they are device data): one outside [0, V) gets a NaN logprob.
  void logprobs(Tensor out_values, Tensor out_ids, const Tensor& logits, const Tensor& chosen_ids, int n) override;
  void copy_blocks(KvStorage& device, Tensor& host, std::span<const BlockCopy> copies) override;

  // The second queue is a second CUDA stream, joined by events (which a graph capture records as edges).
  // Giving either stream a higher priority measured no different (R7B FP8 decode, H200).
  void side_begin() override;
  void side_end() override;
  void side_join() override;

  // CUDA graph of the stream's work (relaxed capture mode: the caching allocator may cudaMalloc meanwhile).
  std::unique_ptr<Graph> capture(const std::function<void()>& body) override;

  cudaStream_t stream() const { return main_stream_; }
  // The most tokens matmul_fp8 gives the small-batch kernel (0: cuBLASLt always); for tests and benchmarks
  // comparing the two. Clamped to the kernel's limit.
  void set_fp8_small_matmul_max_tokens(int64_t t);
  // Which bf16 matmuls go to tide's small-batch kernel (fp8_small_matmul.cu's register-fed kernel on bf16):
  // negative, the default, those of cuda::bf16_small_matmul_preferred (small weights; on larger ones
  // cuBLASLt's GEMV reads faster); T >= 0 every matmul of up to T tokens (0: cuBLASLt always); for tests and
  // benchmarks.
  void set_bf16_small_matmul_max_tokens(int64_t t);
  // Which token counts matmul_fp8 gives the wgmma kernel (fp8_wgmma_matmul.cu) when the small-batch kernel
  // does not take them: negative, the default, those of cuda::fp8_wgmma_preferred; T >= 0, every count up to T
  // (0: cuBLASLt above the small-batch kernel's range), clamped to the kernel's limit.
  void set_fp8_wgmma_matmul_max_tokens(int64_t t);
  // Whether the wgmma FP8 matmuls issued while both streams' chains run (between side_begin and side_join)
  // take their stream's share of the SMs (cuda::fp8_wgmma_stream_sms; on, the default) or every SM; for
  // benchmarks measuring the difference.
  void set_fp8_wgmma_stream_shares(bool on) { fp8_wgmma_stream_shares_ = on; }
  // Whether cuBLASLt's FP8 matmuls (prefill chunks and decode batches past the wgmma kernel's widths) keep
  // their sums in the tensor cores over the whole of K (CUBLASLT_MATMUL_DESC_FAST_ACCUM; on, the default) or
  // promote partial sums to f32 as they go. The tensor cores add FP8 products with about 13 bits: on random
  // codes at K = 14336 the output is then off by 2e-3 relative instead of 2e-4, about a bf16 output's own
  // rounding, and far below the FP8 weights' quantization error (the FP8 model tests' logits are as close
  // either way), for 5-26% faster GEMMs at prefill sizes (docs/PERFORMANCE.md). Off: for tests and
  // benchmarks measuring the difference. Plans are kept per setting.
  void set_fp8_fast_accum(bool on) { fp8_fast_accum_ = on; }
  // Forces the small-batch kernel's shape `variant` (tests, benchmarks; -1: the streaming kernel, its stages
  // chosen per matrix, the default; -2: the register-fed kernel for every matrix, its shape chosen per matrix;
  // kernels.h, Fp8SmallMatmul::variant). Returns how many variants there are.
  int set_fp8_small_matmul_variant(int variant);
  // Which kernel serves prefill attention at head_dim 128 over a bf16 cache (kernels.h); for tests and
  // benchmarks comparing the two.
  void set_prefill_attention_kernel(cuda::PrefillAttentionKernel kernel) { prefill_kernel_ = kernel; }
  // Whether prefill attention over an FP8 cache dequantizes the blocks it reads into bf16 scratch for the bf16
  // kernels (on by default, where they fit in kFp8KvPrefillScratchBytes and no graph is being recorded) or
  // runs the FP8 kernels on the codes; for tests and benchmarks covering both.
  void set_fp8_kv_prefill_dequantize(bool on) { fp8_kv_prefill_dequantize_ = on; }
  // The decode attention kernel's CTAs per SM (kernels.h, DecodePlan): 0 chosen per launch (the default), 2 or 3
  // forced where the shape allows (tests covering both builds of the kernel, benchmarks comparing them).
  void set_decode_ctas_per_sm(int ctas) { decode_ctas_per_sm_ = ctas; }
  // How the streaming FP8 kernel's tensor-map variants copy weights on this driver (kernels.h).
  static const char* fp8_tensor_map_feed();
  // Programmatic dependent launch of tide's kernels (launch.cuh): on by default; off for benchmarks that
  // measure what it saves. Process-wide (the launchers see only a stream).
  static void set_programmatic_launch(bool on);

 private:
  // sample() and sample_with_drafts() (drafts null: none): the per-row arrays staged in one copy, one launch.
  void sample_rows(Tensor out_ids, Tensor logits, const SamplingBatch& batch, const DraftSampling* drafts);
  struct Allocator;   // caching device allocator, shared with the tensors it handed out
  // cuBLASLt descriptors and algorithm of one matmul shape (cuda_matmul.cpp).
  struct MatmulPlan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};

    MatmulPlan() = default;
    MatmulPlan(const MatmulPlan&) = delete;
    MatmulPlan& operator=(const MatmulPlan&) = delete;
    ~MatmulPlan() {
      if (d) cublasLtMatrixLayoutDestroy(d);
      if (b) cublasLtMatrixLayoutDestroy(b);
      if (a) cublasLtMatrixLayoutDestroy(a);
      if (op) cublasLtMatmulDescDestroy(op);
    }
  };

  // alloc() without zeroing: scratch the kernels write before they read.
  Tensor alloc_scratch(DType dtype, Shape shape);
  // fp8: E4M3 x E4M3 with one f32 scale per weight row and per token (outer-vector scales).
  MatmulPlan& matmul_plan(int64_t t, int64_t k, int64_t n, cudaDataType_t out_type, bool fp8);

  std::shared_ptr<Allocator> allocator_;
  // Memory of tensors allocated while capturing: only graphs use it, so a buffer one recording dropped can
  // serve another recording but never eager work that might overlap a replay.
  std::shared_ptr<Allocator> graph_allocator_;
  bool capturing_ = false;
  int device_ = 0;
  int num_sms_ = 1;
  int64_t fp8_small_max_tokens_;
  int64_t bf16_small_max_tokens_ = -1;  // negative: cuda::bf16_small_matmul_preferred
  int64_t fp8_wgmma_max_tokens_ = -1;  // negative: cuda::fp8_wgmma_preferred
  int fp8_small_variant_ = -1;
  cuda::PrefillAttentionKernel prefill_kernel_ = cuda::PrefillAttentionKernel::kAuto;
  int decode_ctas_per_sm_ = 0;
  bool fp8_kv_prefill_dequantize_ = true;
  bool fp8_wgmma_stream_shares_ = true;
  bool fp8_fast_accum_ = true;
  bool side_forked_ = false;  // between side_begin and side_join: the side stream's work runs beside the main's
  // Ops go to stream_ (with workspace_ for cuBLASLt): the main stream's, or the side stream's between
  // side_begin() and side_end().
  cudaStream_t stream_ = nullptr;
  cudaStream_t main_stream_ = nullptr, side_stream_ = nullptr;
  cudaEvent_t side_fork_ = nullptr, side_done_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  void* main_workspace_ = nullptr;
  void* side_workspace_ = nullptr;
  // The FP8 small-batch matmul's split-tile scratch (kernels.h, Fp8SmallMatmul::split_scratch), one per stream
  // and switched with workspace_.
  void* split_scratch_ = nullptr;
  void* main_split_scratch_ = nullptr;
  void* side_split_scratch_ = nullptr;
  size_t workspace_bytes_ = 0;
  // The sample op's per-row arrays: kSampleSlots pinned stagings, each with its device copy and the event of its
  // last copy (a staging is rewritten only once that copy has run), used in turn so that the host can queue
  // several sample ops ahead of the GPU (chained draft steps) without waiting.
  struct SampleSlot {
    void* staging = nullptr;
    void* device = nullptr;
    size_t capacity = 0;
    cudaEvent_t staged = nullptr;
  };
  static constexpr int kSampleSlots = 4;
  SampleSlot sample_slots_[kSampleSlots];
  int sample_next_ = 0;
  // upload_into_as()'s pinned staging: kStagingSlots buffers of kStagingSlotBytes (allocated at the first
  // upload), each with the event of the last transfer that read it; used in turn.
  static constexpr int kStagingSlots = 4;
  static constexpr size_t kStagingSlotBytes = size_t{16} << 20;
  void* staging_ = nullptr;
  cudaEvent_t staging_done_[kStagingSlots] = {};
  int staging_next_ = 0;
  // By (n, t, k, output type, FP8, fast accumulation); cleared in the destructor before lt_ goes.
  std::map<std::tuple<int64_t, int64_t, int64_t, int, bool, bool>, std::unique_ptr<MatmulPlan>> matmul_plans_;
};

}  // namespace tide
