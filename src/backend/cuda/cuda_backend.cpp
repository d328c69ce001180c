#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace tide {

// --- memory ---

// Device memory is expensive to allocate (cudaMalloc synchronizes), and the forward pass allocates its
// activations every step, so freed buffers are kept by size and handed out again.
struct CudaBackend::Allocator {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_by_size;
  bool closing = false;

  static size_t round(size_t bytes) { return (std::max<size_t>(bytes, 1) + 511) / 512 * 512; }

  void* take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto& list = free_by_size[bytes];
      if (!list.empty()) {
        void* p = list.back();
        list.pop_back();
        return p;
      }
    }
    void* p = nullptr;
    TIDE_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }

  void give_back(void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    if (closing) {
      cudaFree(p);
    } else {
      free_by_size[bytes].push_back(p);
    }
  }

  ~Allocator() {
    for (auto& [size, list] : free_by_size)
      for (void* p : list) cudaFree(p);
  }
};

bool CudaBackend::available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

CudaBackend::CudaBackend(int device)
    : allocator_(std::make_shared<Allocator>()),
      graph_allocator_(std::make_shared<Allocator>()),
      device_(device),
      fp8_small_max_tokens_(cuda::kFp8SmallMatmulMaxTokens) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) fail("--device cuda: no CUDA device is available");
  if (device < 0 || device >= count) fail("--device cuda: device {} does not exist ({} present)", device, count);
  TIDE_CUDA_CHECK(cudaSetDevice(device));
  TIDE_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&main_stream_, cudaStreamNonBlocking));
  TIDE_CUDA_CHECK(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
  stream_ = main_stream_;
  TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&side_fork_, cudaEventDisableTiming));
  TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&side_done_, cudaEventDisableTiming));
  TIDE_CUBLAS_CHECK(cublasLtCreate(&lt_));
  workspace_bytes_ = size_t{32} << 20;
  TIDE_CUDA_CHECK(cudaMalloc(&main_workspace_, workspace_bytes_));
  TIDE_CUDA_CHECK(cudaMalloc(&side_workspace_, workspace_bytes_));
  workspace_ = main_workspace_;
  const size_t split_bytes = cuda::fp8_split_scratch_bytes(num_sms_);
  for (void** scratch : {&main_split_scratch_, &side_split_scratch_}) {
    TIDE_CUDA_CHECK(cudaMalloc(scratch, split_bytes));
    TIDE_CUDA_CHECK(cudaMemset(*scratch, 0, split_bytes));
  }
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());  // the memsets ran on the legacy stream, which ours do not wait for
  split_scratch_ = main_split_scratch_;
  TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&sample_staged_, cudaEventDisableTiming));
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(side_stream_);
  cudaStreamSynchronize(main_stream_);
  for (Allocator* a : {allocator_.get(), graph_allocator_.get()}) {
    std::lock_guard<std::mutex> lock(a->mutex);
    a->closing = true;  // tensors that outlive the backend free their memory directly
  }
  matmul_plans_.clear();
  cudaFreeHost(sample_staging_);
  cudaFree(sample_device_);
  cudaEventDestroy(sample_staged_);
  cudaFree(main_workspace_);
  cudaFree(side_workspace_);
  cudaFree(main_split_scratch_);
  cudaFree(side_split_scratch_);
  cublasLtDestroy(lt_);
  cudaEventDestroy(side_fork_);
  cudaEventDestroy(side_done_);
  cudaStreamDestroy(side_stream_);
  cudaStreamDestroy(main_stream_);
}

void CudaBackend::bind_thread() { TIDE_CUDA_CHECK(cudaSetDevice(device_)); }

std::optional<Backend::MemoryInfo> CudaBackend::memory_info() const {
  size_t free = 0, total = 0;
  TIDE_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  size_t cached = 0;  // the graph pool's free buffers are not counted: graphs replay into them
  {
    std::lock_guard<std::mutex> lock(allocator_->mutex);
    for (const auto& [size, list] : allocator_->free_by_size) cached += size * list.size();
  }
  return MemoryInfo{static_cast<int64_t>(free + cached), static_cast<int64_t>(total)};
}

Tensor CudaBackend::alloc(DType dtype, Shape shape) {
  Tensor t = alloc_scratch(dtype, std::move(shape));
  TIDE_CUDA_CHECK(cudaMemsetAsync(t.data, 0, Allocator::round(t.nbytes()), stream_));
  return t;
}

Tensor CudaBackend::alloc_scratch(DType dtype, Shape shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  const size_t bytes = Allocator::round(t.nbytes());
  if (stream_ != main_stream_) {
    fail("cuda backend: an op allocated memory on the side stream (see Backend::side_begin)");
  }
  std::shared_ptr<Allocator> owner = capturing_ ? graph_allocator_ : allocator_;
  void* p = owner->take(bytes);
  t.storage = std::shared_ptr<void>(p, [owner, bytes](void* q) { owner->give_back(q, bytes); });
  t.data = p;
  return t;
}

Tensor CudaBackend::alloc_host(DType dtype, Shape shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  void* p = nullptr;
  TIDE_CUDA_CHECK(cudaHostAlloc(&p, std::max<size_t>(t.nbytes(), 1), cudaHostAllocDefault));
  std::memset(p, 0, t.nbytes());
  t.storage = std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
  t.data = p;
  return t;
}

Tensor CudaBackend::upload_as(const void* host, DType host_dtype, Shape shape, DType dtype) {
  TIDE_CHECK(!capturing_);  // it synchronizes, which a recording stream does not allow
  Tensor t = alloc(dtype, shape);
  const size_t n = static_cast<size_t>(t.numel());
  const bool is_float = host_dtype == DType::kF32 || host_dtype == DType::kF16 || host_dtype == DType::kBF16;
  std::vector<unsigned char> staging;
  const void* src = host;
  if (is_float && dtype != host_dtype) {
    if (dtype != DType::kF32 && dtype != DType::kBF16) fail("cuda backend: cannot store floats as {}", dtype_name(dtype));
    std::vector<float> f32(n);
    convert_to_f32(host, host_dtype, f32.data(), n);
    if (dtype == DType::kF32) {
      staging.resize(n * 4);
      std::memcpy(staging.data(), f32.data(), n * 4);
    } else {
      staging.resize(n * 2);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t b = f32_to_bf16(f32[i]);
        std::memcpy(staging.data() + 2 * i, &b, 2);
      }
    }
    src = staging.data();
  } else if (!is_float && dtype != host_dtype) {
    fail("cuda backend: cannot convert {} to {}", dtype_name(host_dtype), dtype_name(dtype));
  }
  TIDE_CUDA_CHECK(cudaMemcpyAsync(t.data, src, t.nbytes(), cudaMemcpyHostToDevice, stream_));
  TIDE_CUDA_CHECK(cudaStreamSynchronize(stream_));  // `staging` and `host` must outlive the copy
  return t;
}

void CudaBackend::upload_into(Tensor t, const void* host) {
  TIDE_CHECK(!capturing_ && stream_ == main_stream_);
  // From pageable memory the copy is staged before the call returns (`host` is free again) and runs in
  // stream order without synchronizing the device.
  TIDE_CUDA_CHECK(cudaMemcpyAsync(t.data, host, t.nbytes(), cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::download(const Tensor& t, void* host) {
  TIDE_CHECK(!capturing_ && stream_ == main_stream_);
  TIDE_CUDA_CHECK(cudaMemcpyAsync(host, t.data, t.nbytes(), cudaMemcpyDeviceToHost, stream_));
  TIDE_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// --- ops ---

namespace {

using cuda::bf16;

bf16* bf(const Tensor& t, const char* what) {
  if (t.dtype != DType::kBF16) fail("cuda backend: {} must be BF16, got {}", what, dtype_name(t.dtype));
  return static_cast<bf16*>(t.data);
}

// The per-token row kernels hold a row in registers (row_tile.cuh).
void check_row(int64_t n, const char* op) {
  if (n > cuda::kMaxRowElements) fail("cuda backend: {} takes rows of at most {} elements, got {}", op, cuda::kMaxRowElements, n);
}

template <typename T>
T* typed(const Tensor& t, DType dtype, const char* what) {
  if (t.dtype != dtype) fail("cuda backend: {} must be {}, got {}", what, dtype_name(dtype), dtype_name(t.dtype));
  return static_cast<T*>(t.data);
}

}  // namespace

// out: [T, H], table: [V, H], ids: [T]
void CudaBackend::embedding(Tensor out, const Tensor& table, const Tensor& ids) {
  TIDE_CHECK(out.dim(0) == ids.numel() && out.dim(1) == table.dim(1));
  cuda::launch_embedding(bf(out, "embedding output"), bf(table, "embedding table"),
                         typed<int32_t>(ids, DType::kI32, "token ids"), ids.numel(), table.dim(1), stream_);
}

// out: [R, H], x: [T, H], rows: [R]
void CudaBackend::gather_rows(Tensor out, const Tensor& x, const Tensor& rows) {
  TIDE_CHECK(out.dim(0) == rows.numel() && out.dim(1) == x.dim(1));
  cuda::launch_gather_rows(bf(out, "gather output"), bf(x, "gather input"), typed<int32_t>(rows, DType::kI32, "rows"),
                           rows.numel(), x.dim(1), stream_);
}

// out, x: [T, H], weight: [H]
void CudaBackend::layer_norm(Tensor out, const Tensor& x, const Tensor& weight, float eps) {
  TIDE_CHECK(out.shape == x.shape && weight.numel() == x.dim(1));
  check_row(x.dim(1), "layer_norm");
  cuda::launch_layer_norm(bf(out, "layer_norm output"), bf(x, "layer_norm input"), bf(weight, "layer_norm weight"),
                          x.dim(0), x.dim(1), eps, stream_);
}

// h, a, b, out: [T, H], weight: [H]
void CudaBackend::residual_layer_norm(Tensor h, const Tensor& a, const Tensor& b, Tensor out, const Tensor& weight,
                                      float eps) {
  TIDE_CHECK(a.shape == h.shape && b.shape == h.shape && out.shape == h.shape && weight.numel() == h.dim(1));
  check_row(h.dim(1), "residual_layer_norm");
  cuda::launch_residual_layer_norm(bf(h, "residual"), bf(a, "residual input"), bf(b, "residual input"),
                                   bf(out, "layer_norm output"), bf(weight, "layer_norm weight"), h.dim(0), h.dim(1),
                                   eps, stream_);
}

// qkv: [T, heads_total * D], positions: [T], inv_freq: [D / 2]
void CudaBackend::rope(Tensor qkv, const Tensor& positions, const Tensor& inv_freq, int64_t num_rope_heads) {
  const int64_t head_dim = 2 * inv_freq.numel();
  TIDE_CHECK(qkv.dim(0) == positions.numel() && num_rope_heads * head_dim <= qkv.dim(1));
  cuda::launch_rope(bf(qkv, "rope input"), typed<int32_t>(positions, DType::kI32, "positions"),
                    typed<float>(inv_freq, DType::kF32, "inv_freq"), qkv.dim(0), qkv.dim(1), num_rope_heads,
                    head_dim, stream_);
}

// qkv: [T, (Hq + 2 Hkv) * D], positions, slot_mapping: [T], inv_freq: [D / 2]
void CudaBackend::rope_store_kv(KvStorage& kv, int64_t layer, Tensor qkv, const Tensor& positions,
                                const Tensor& inv_freq, const Tensor& slot_mapping, const AttentionShape& shape) {
  const int64_t d = shape.head_dim;
  TIDE_CHECK(qkv.dim(1) == (shape.num_heads + 2 * shape.num_heads_kv) * d && slot_mapping.numel() == qkv.dim(0));
  TIDE_CHECK(positions.numel() == qkv.dim(0) && 2 * inv_freq.numel() == d && d % 2 == 0);
  TIDE_CHECK(layer >= 0 && layer < kv.num_layers);
  bf16* cache = kv.fp8() ? nullptr : bf(kv.data, "KV cache");
  uint8_t* codes = kv.fp8() ? static_cast<uint8_t*>(kv.data.data) : nullptr;
  float* scales = kv.fp8() ? typed<float>(kv.scales, DType::kF32, "KV scales") : nullptr;
  cuda::launch_rope_store_kv(cache, codes, scales, bf(qkv, "qkv"), typed<int32_t>(positions, DType::kI32, "positions"),
                             typed<float>(inv_freq, DType::kF32, "inv_freq"),
                             typed<int64_t>(slot_mapping, DType::kI64, "slots"), qkv.dim(0), shape.num_heads,
                             shape.num_heads_kv, d, kv.num_layers, layer, kv.block_size, stream_);
}

// qkv: [T, (Hq + 2 Hkv) * D], slot_mapping: [T]
void CudaBackend::store_kv(KvStorage& kv, int64_t layer, const Tensor& qkv, const Tensor& slot_mapping,
                           const AttentionShape& shape) {
  const int64_t d = shape.head_dim;
  TIDE_CHECK(qkv.dim(1) == (shape.num_heads + 2 * shape.num_heads_kv) * d && slot_mapping.numel() == qkv.dim(0));
  TIDE_CHECK(layer >= 0 && layer < kv.num_layers);
  if (kv.fp8()) {
    cuda::launch_store_kv_fp8(static_cast<uint8_t*>(kv.data.data), typed<float>(kv.scales, DType::kF32, "KV scales"),
                              bf(qkv, "qkv"), typed<int64_t>(slot_mapping, DType::kI64, "slots"), qkv.dim(0),
                              qkv.dim(1), shape.num_heads * d, shape.num_heads_kv, d, kv.num_layers, layer,
                              kv.block_size, stream_);
    return;
  }
  cuda::launch_store_kv(bf(kv.data, "KV cache"), bf(qkv, "qkv"), typed<int64_t>(slot_mapping, DType::kI64, "slots"),
                        qkv.dim(0), qkv.dim(1), shape.num_heads * d, shape.num_heads_kv * d, kv.num_layers, layer,
                        kv.block_size, stream_);
}

// Sequences with at most this many new tokens go to the decode kernel (when every sequence has).
constexpr int64_t kDecodeMaxTokens = 8;

// out: [T, Hq * D], qkv: [T, (Hq + 2 Hkv) * D]
void CudaBackend::attention(Tensor out, const Tensor& qkv, const KvStorage& kv, int64_t layer,
                            const AttentionBatch& batch, const AttentionShape& shape, int64_t window) {
  const int64_t group = shape.num_heads / shape.num_heads_kv;
  const bool mma = cuda::mma_attention_supports(shape.head_dim);
  if (!mma && !cuda::paged_attention_supports(shape.head_dim, group)) {
    fail("cuda backend: attention with head_dim {} and {} query heads per KV head is not supported (head_dim 64, "
         "128, 256, or at most 256 with at most 16 query heads per KV head)", shape.head_dim, group);
  }
  if (kv.fp8() && !mma) {
    fail("cuda backend: an FP8 KV cache needs head_dim 64, 128 or 256 (the tensor-core attention), got {}",
         shape.head_dim);
  }
  TIDE_CHECK(qkv.dim(1) == (shape.num_heads + 2 * shape.num_heads_kv) * shape.head_dim);
  TIDE_CHECK(out.dim(1) == shape.num_heads * shape.head_dim && batch.block_size == kv.block_size);
  // The kernels index cache rows (one token's K or V of one layer) and positions with 32-bit integers.
  TIDE_CHECK(kv.data.dim(0) * kv.num_layers * 2 * kv.block_size < (int64_t{1} << 31));
  TIDE_CHECK(batch.max_position < (int64_t{1} << 30) && qkv.dim(0) * shape.num_heads < (int64_t{1} << 31));
  cuda::PagedAttentionParams p{};
  p.out = bf(out, "attention output");
  p.qkv = bf(qkv, "qkv");
  if (kv.fp8()) {
    p.cache8 = static_cast<const uint8_t*>(kv.data.data);
    p.scales = typed<float>(kv.scales, DType::kF32, "KV cache scales");
  } else {
    p.cache = bf(kv.data, "KV cache");
  }
  p.positions = typed<int32_t>(batch.positions, DType::kI32, "positions");
  p.seq_starts = typed<int32_t>(batch.seq_starts, DType::kI32, "seq_starts");
  p.block_tables = typed<int32_t>(batch.block_tables, DType::kI32, "block tables");
  p.num_tokens = qkv.dim(0);
  p.num_seqs = batch.seq_starts.numel() - 1;
  p.max_blocks = batch.block_tables.dim(1);
  p.num_heads = shape.num_heads;
  p.num_heads_kv = shape.num_heads_kv;
  p.head_dim = shape.head_dim;
  p.num_layers = kv.num_layers;
  p.layer = layer;
  p.block_size = kv.block_size;
  p.num_blocks = kv.data.dim(0);
  p.window = window;
  p.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const int64_t max_keys = window == 0 ? batch.max_position + 1 : std::min(window, batch.max_position + 1);
  if (mma) {
    // Few new tokens per sequence: one CTA per token, split over the keys. Otherwise row tiles of one
    // sequence's tokens, which read each K/V tile once for all of them.
    if (batch.max_seq_tokens <= kDecodeMaxTokens && cuda::mma_decode_supports(shape.head_dim, group)) {
      const int splits = cuda::mma_decode_splits(p.num_tokens, p.num_heads_kv, max_keys, num_sms_);
      const int64_t slots = splits > 1 ? p.num_tokens * p.num_heads * splits : 1;
      // Every slot is written before the merge reads it (an empty split writes its (max, sum) as (-inf, 0)):
      // no memset in front of the kernel.
      const Tensor part_out = alloc_scratch(DType::kF32, Shape{slots, shape.head_dim});
      const Tensor part_ml = alloc_scratch(DType::kF32, Shape{slots, 2});
      cuda::launch_mma_decode(p, max_keys, part_out.as<float>(), part_ml.as<float>(), splits, stream_);
    } else {
      cuda::launch_mma_prefill(p, batch.max_seq_tokens, stream_);
    }
    return;
  }
  const int splits = cuda::paged_attention_splits(p.num_tokens, p.num_heads_kv, max_keys, num_sms_);
  const int64_t slots = p.num_tokens * p.num_heads * splits;
  const Tensor part_out = alloc(DType::kF32, Shape{slots, shape.head_dim});
  const Tensor part_ml = alloc(DType::kF32, Shape{slots, 2});
  cuda::launch_paged_attention(p, part_out.as<float>(), part_ml.as<float>(), splits, stream_);
}

// out: [T, I], gate_up: [T, 2I]
void CudaBackend::silu_mul(Tensor out, const Tensor& gate_up) {
  TIDE_CHECK(gate_up.dim(1) == 2 * out.dim(1) && gate_up.dim(0) == out.dim(0));
  cuda::launch_silu_mul(bf(out, "silu_mul output"), bf(gate_up, "gate_up"), out.dim(0), out.dim(1), stream_);
}

void CudaBackend::copy(Tensor out, const Tensor& x) {
  if (out.dtype != x.dtype || out.shape != x.shape) fail("cuda backend: copy between different dtypes or shapes");
  if (x.nbytes() > 0) TIDE_CUDA_CHECK(cudaMemcpyAsync(out.data, x.data, x.nbytes(), cudaMemcpyDeviceToDevice, stream_));
}

// out8: [T, K] e4m3, scales: [T] f32, x: [T, K] bf16
void CudaBackend::quantize_fp8(Tensor out8, Tensor scales, const Tensor& x) {
  TIDE_CHECK(out8.shape == x.shape && scales.numel() == x.dim(0));
  check_row(x.dim(1), "quantize_fp8");
  if (out8.dtype != DType::kF8E4M3) fail("cuda backend: quantize_fp8 output must be F8_E4M3");
  cuda::launch_quantize_fp8(out8.as<uint8_t>(), typed<float>(scales, DType::kF32, "quantize_fp8 scales"),
                            bf(x, "quantize_fp8 input"), x.dim(0), x.dim(1), stream_);
}

// out8: [T, H] e4m3, scales: [T] f32, x: [T, H] bf16, weight: [H]
void CudaBackend::layer_norm_fp8(Tensor out8, Tensor scales, const Tensor& x, const Tensor& weight, float eps,
                                 Tensor /*scratch*/) {
  TIDE_CHECK(out8.shape == x.shape && scales.numel() == x.dim(0) && weight.numel() == x.dim(1));
  check_row(x.dim(1), "layer_norm_fp8");
  cuda::launch_layer_norm_fp8(typed<uint8_t>(out8, DType::kF8E4M3, "layer_norm_fp8 output"),
                              typed<float>(scales, DType::kF32, "layer_norm_fp8 scales"), bf(x, "layer_norm input"),
                              bf(weight, "layer_norm weight"), x.dim(0), x.dim(1), eps, stream_);
}

// h, a, b: [T, H] bf16, out8: [T, H] e4m3, scales: [T] f32, weight: [H]
void CudaBackend::residual_layer_norm_fp8(Tensor h, const Tensor& a, const Tensor& b, Tensor out8, Tensor scales,
                                          const Tensor& weight, float eps, Tensor /*scratch*/) {
  TIDE_CHECK(a.shape == h.shape && b.shape == h.shape && out8.shape == h.shape && scales.numel() == h.dim(0) &&
             weight.numel() == h.dim(1));
  check_row(h.dim(1), "residual_layer_norm_fp8");
  cuda::launch_residual_layer_norm_fp8(bf(h, "residual"), bf(a, "residual input"), bf(b, "residual input"),
                                       typed<uint8_t>(out8, DType::kF8E4M3, "layer_norm_fp8 output"),
                                       typed<float>(scales, DType::kF32, "layer_norm_fp8 scales"),
                                       bf(weight, "layer_norm weight"), h.dim(0), h.dim(1), eps, stream_);
}

// out8: [T, I] e4m3, scales: [T] f32, gate_up: [T, 2I] bf16
void CudaBackend::silu_mul_fp8(Tensor out8, Tensor scales, const Tensor& gate_up, Tensor /*scratch*/) {
  TIDE_CHECK(gate_up.dim(1) == 2 * out8.dim(1) && gate_up.dim(0) == out8.dim(0) && scales.numel() == out8.dim(0));
  check_row(out8.dim(1), "silu_mul_fp8");
  if (cuda::silu_mul_fp8_split_parts(out8.dim(0), out8.dim(1)) > 0) {
    cuda::launch_silu_mul_fp8_split(
        typed<uint8_t>(out8, DType::kF8E4M3, "silu_mul_fp8 output"),
        typed<float>(scales, DType::kF32, "silu_mul_fp8 scales"), bf(gate_up, "gate_up"), out8.dim(0), out8.dim(1),
        reinterpret_cast<uint32_t*>(static_cast<char*>(split_scratch_) + cuda::kSwigluSplitSyncOffset), stream_);
    return;
  }
  cuda::launch_silu_mul_fp8(typed<uint8_t>(out8, DType::kF8E4M3, "silu_mul_fp8 output"),
                            typed<float>(scales, DType::kF32, "silu_mul_fp8 scales"), bf(gate_up, "gate_up"),
                            out8.dim(0), out8.dim(1), stream_);
}

void CudaBackend::add(Tensor out, const Tensor& a, const Tensor& b) {
  TIDE_CHECK(a.shape == b.shape && out.shape == a.shape);
  cuda::launch_add(bf(out, "add output"), bf(a, "add input"), bf(b, "add input"), out.numel(), stream_);
}

// out_ids: [R] i32, logits: [R, V] f32
void CudaBackend::sample(Tensor out_ids, Tensor logits, const SamplingBatch& batch) {
  float* l = typed<float>(logits, DType::kF32, "sample logits");
  int32_t* ids = typed<int32_t>(out_ids, DType::kI32, "sample ids");
  const int64_t num_rows = logits.dim(0), vocab = logits.dim(1);
  TIDE_CHECK(out_ids.numel() == num_rows);
  check_sampling_batch(batch, num_rows, vocab);
  if (num_rows == 0) return;

  // Staging layout: rows, then history_starts, then history, each 16-byte aligned.
  auto align = [](size_t n) { return (n + 15) / 16 * 16; };
  const size_t rows_bytes = align(batch.rows.size_bytes());
  const size_t starts_bytes = align(batch.history_starts.size_bytes());
  const size_t bytes = rows_bytes + starts_bytes + batch.history.size_bytes();
  TIDE_CUDA_CHECK(cudaEventSynchronize(sample_staged_));  // the previous copy has left the staging
  if (bytes > sample_capacity_) {
    TIDE_CUDA_CHECK(cudaStreamSynchronize(stream_));  // no queued kernel still reads the old device buffer
    cudaFreeHost(sample_staging_);
    cudaFree(sample_device_);
    sample_capacity_ = std::max<size_t>(bytes * 2, 64 << 10);
    TIDE_CUDA_CHECK(cudaHostAlloc(&sample_staging_, sample_capacity_, cudaHostAllocDefault));
    TIDE_CUDA_CHECK(cudaMalloc(&sample_device_, sample_capacity_));
  }
  auto* staging = static_cast<unsigned char*>(sample_staging_);
  std::memcpy(staging, batch.rows.data(), batch.rows.size_bytes());
  if (!batch.history_starts.empty()) {
    std::memcpy(staging + rows_bytes, batch.history_starts.data(), batch.history_starts.size_bytes());
    if (!batch.history.empty()) {
      std::memcpy(staging + rows_bytes + starts_bytes, batch.history.data(), batch.history.size_bytes());
    }
  }
  TIDE_CUDA_CHECK(cudaMemcpyAsync(sample_device_, sample_staging_, bytes, cudaMemcpyHostToDevice, stream_));
  TIDE_CUDA_CHECK(cudaEventRecord(sample_staged_, stream_));

  auto* device = static_cast<unsigned char*>(sample_device_);
  cuda::SampleParams p{};
  p.out_ids = ids;
  p.logits = l;
  p.rows = reinterpret_cast<const SamplingRow*>(device);
  p.history_starts = batch.history_starts.empty() ? nullptr : reinterpret_cast<const int32_t*>(device + rows_bytes);
  p.history = reinterpret_cast<const HistoryToken*>(device + rows_bytes + starts_bytes);
  p.num_rows = num_rows;
  p.vocab = vocab;
  cuda::launch_sample(p, stream_);
}

// out_values: [R, 1 + n] f32, out_ids: [R, n] i32, logits: [R, V] f32, chosen_ids: [R] i32
void CudaBackend::logprobs(Tensor out_values, Tensor out_ids, const Tensor& logits, const Tensor& chosen_ids, int n) {
  static_assert(cuda::kLogprobsSlots == kMaxLogprobs);
  check_logprobs_args(out_values, out_ids, logits, chosen_ids, n);
  cuda::LogprobsParams p{};
  p.out_values = out_values.as<float>();
  p.out_ids = out_ids.as<int32_t>();
  p.logits = logits.as<float>();
  p.chosen_ids = chosen_ids.as<int32_t>();
  p.num_rows = logits.dim(0);
  p.vocab = logits.dim(1);
  p.n = n;
  cuda::launch_logprobs(p, stream_);
}

bool CudaBackend::supports_fp8_kv(int64_t head_dim) const { return cuda::mma_attention_supports(head_dim); }

void CudaBackend::copy_blocks(KvStorage& device, Tensor& host, std::span<const BlockCopy> copies) {
  const size_t block_bytes = kv_block_bytes(device);
  // One stream, in order: an eviction lands before a later copy or kernel reuses its block or slot.
  for (const BlockCopy& c : copies) {
    TIDE_CHECK(valid_block_copy(device, host, c));
    unsigned char* h = static_cast<unsigned char*>(host.data) + static_cast<size_t>(c.host_block) * block_bytes;
    for (const KvBlockPart& part : kv_block_parts(device, c.device_block)) {
      if (part.bytes == 0) continue;  // no scales
      if (c.direction == BlockCopy::Direction::kToHost) {
        TIDE_CUDA_CHECK(cudaMemcpyAsync(h, part.ptr, part.bytes, cudaMemcpyDeviceToHost, stream_));
      } else {
        TIDE_CUDA_CHECK(cudaMemcpyAsync(part.ptr, h, part.bytes, cudaMemcpyHostToDevice, stream_));
      }
      h += part.bytes;
    }
  }
}

}  // namespace tide
