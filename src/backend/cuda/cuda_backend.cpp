#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <map>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/tensor_args.h"
#include "core/parallel.h"

namespace tide {

// --- memory ---

// Device memory is expensive to allocate (cudaMalloc synchronizes), and the forward pass allocates its
// activations every step, so freed buffers are kept and handed out again. Every step of a new batch mix
// asks for new sizes, so a freed buffer serves any request up to its own size that it does not waste more than
// half of (best fit), and sizes are rounded (512 B below 1 MiB, 2 MiB above) so that near sizes share buffers.
// When cudaMalloc fails, the cached buffers that no graph records are given back to the driver and the
// allocation tried once more; only then is the device out of memory (OutOfMemoryError).
struct CudaBackend::Allocator {
  // `spare`: the allocator whose cache goes back to the driver when an allocation fails (itself, for the eager
  // allocator; the eager one for the graph pool, whose buffers recorded graphs keep using).
  explicit Allocator(std::shared_ptr<Allocator> spare_cache = nullptr) : spare(std::move(spare_cache)) {}

  std::mutex mutex;
  std::multimap<size_t, void*> free_by_size;
  size_t cached_bytes = 0;
  bool closing = false;
  std::shared_ptr<Allocator> spare;  // null: this allocator's own cache

  static size_t round(size_t bytes) {
    constexpr size_t kSmall = 512, kLarge = size_t{2} << 20;
    bytes = std::max<size_t>(bytes, 1);
    return bytes < (size_t{1} << 20) ? (bytes + kSmall - 1) / kSmall * kSmall : (bytes + kLarge - 1) / kLarge * kLarge;
  }

  // A buffer of at least `bytes` (rounded); its size in `size` (what give_back takes).
  void* take(size_t bytes, size_t& size) {
    bytes = round(bytes);
    {
      std::lock_guard<std::mutex> lock(mutex);
      const auto it = free_by_size.lower_bound(bytes);
      if (it != free_by_size.end() && it->first <= 2 * bytes) {
        size = it->first;
        void* p = it->second;
        free_by_size.erase(it);
        cached_bytes -= size;
        return p;
      }
    }
    size = bytes;
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clears the error, which is not sticky
      (spare ? spare.get() : this)->release_cached();
      err = cudaMalloc(&p, bytes);
    }
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free = 0, total = 0;
      cudaMemGetInfo(&free, &total);
      throw OutOfMemoryError(fmt::format("the GPU is out of memory: {} bytes asked, {} of {} free", bytes, free, total));
    }
    TIDE_CUDA_CHECK(err);
    return p;
  }

  void give_back(void* p, size_t size) {
    std::lock_guard<std::mutex> lock(mutex);
    if (closing) {
      cudaFree(p);
    } else {
      free_by_size.emplace(size, p);
      cached_bytes += size;
    }
  }

  // Returns every cached buffer to the driver. Work queued on any stream may still use them, so the device
  // is synchronized first.
  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex);
    if (free_by_size.empty()) return;
    cudaDeviceSynchronize();
    for (const auto& [size, p] : free_by_size) cudaFree(p);
    free_by_size.clear();
    cached_bytes = 0;
  }

  ~Allocator() {
    for (const auto& [size, p] : free_by_size) cudaFree(p);
  }
};

bool CudaBackend::available() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

CudaBackend::CudaBackend(int device)
    : allocator_(std::make_shared<Allocator>()),
      graph_allocator_(std::make_shared<Allocator>(allocator_)),
      device_(device),
      fp8_small_max_tokens_(cuda::kFp8SmallMatmulMaxTokens) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) fail("cuda backend: no CUDA device is available");
  if (device < 0 || device >= count) fail("cuda backend: device {} does not exist ({} present)", device, count);
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
  const size_t split_bytes = std::max(cuda::fp8_split_scratch_bytes(num_sms_), cuda::fp8_wgmma_scratch_bytes(num_sms_));
  for (void** scratch : {&main_split_scratch_, &side_split_scratch_}) {
    TIDE_CUDA_CHECK(cudaMalloc(scratch, split_bytes));
    TIDE_CUDA_CHECK(cudaMemset(*scratch, 0, split_bytes));
  }
  TIDE_CUDA_CHECK(cudaDeviceSynchronize());  // the memsets ran on the legacy stream, which ours do not wait for
  split_scratch_ = main_split_scratch_;
  for (SampleSlot& slot : sample_slots_) TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&slot.staged, cudaEventDisableTiming));
  for (cudaEvent_t& e : staging_done_) TIDE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(side_stream_);
  cudaStreamSynchronize(main_stream_);
  for (Allocator* a : {allocator_.get(), graph_allocator_.get()}) {
    std::lock_guard<std::mutex> lock(a->mutex);
    a->closing = true;  // tensors that outlive the backend free their memory directly
  }
  matmul_plans_.clear();
  for (SampleSlot& slot : sample_slots_) {
    cudaFreeHost(slot.staging);
    cudaFree(slot.device);
    cudaEventDestroy(slot.staged);
  }
  cudaFreeHost(staging_);
  for (cudaEvent_t e : staging_done_) cudaEventDestroy(e);
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
    cached = allocator_->cached_bytes;
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
  if (stream_ != main_stream_) {
    fail("cuda backend: an op allocated memory on the side stream (see Backend::side_begin)");
  }
  std::shared_ptr<Allocator> owner = capturing_ ? graph_allocator_ : allocator_;
  size_t size = 0;
  void* p = owner->take(t.nbytes(), size);
  t.storage = std::shared_ptr<void>(p, [owner, size](void* q) { owner->give_back(q, size); });
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

namespace {

// `count` elements of `src_dtype` at `src` (possibly unaligned) as `dst_dtype` at `dst`: a copy, or a float
// conversion (F32, F16, BF16 -> F32 or BF16, BF16 rounded to nearest even).
void convert_elements(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t count) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, count * dtype_size(dst_dtype));
  } else if (dst_dtype == DType::kF32) {
    convert_to_f32(src, src_dtype, static_cast<float*>(dst), count);
  } else {
    constexpr size_t kBlock = 4096;  // through an f32 block that stays in the L1 cache
    float f32[kBlock];
    auto* out = static_cast<unsigned char*>(dst);
    const auto* in = static_cast<const unsigned char*>(src);
    for (size_t first = 0; first < count; first += kBlock) {
      const size_t n = std::min(kBlock, count - first);
      convert_to_f32(in + first * dtype_size(src_dtype), src_dtype, f32, n);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t b = f32_to_bf16(f32[i]);
        std::memcpy(out + 2 * (first + i), &b, 2);
      }
    }
  }
}

}  // namespace

void CudaBackend::upload_into_as(Tensor t, const void* host, DType host_dtype) {
  TIDE_CHECK(!capturing_);  // a staging buffer may have to wait for its last transfer, which a recording cannot
  const DType dtype = t.dtype;
  const bool is_float = host_dtype == DType::kF32 || host_dtype == DType::kF16 || host_dtype == DType::kBF16;
  if (is_float && dtype != host_dtype && dtype != DType::kF32 && dtype != DType::kBF16) {
    fail("cuda backend: cannot store floats as {}", dtype_name(dtype));
  }
  if (!is_float && dtype != host_dtype) fail("cuda backend: cannot convert {} to {}", dtype_name(host_dtype), dtype_name(dtype));
  const size_t count = static_cast<size_t>(t.numel()), in_size = dtype_size(host_dtype), out_size = dtype_size(dtype);
  if (count == 0) return;
  if (staging_ == nullptr) {
    TIDE_CUDA_CHECK(cudaHostAlloc(&staging_, kStagingSlots * kStagingSlotBytes, cudaHostAllocDefault));
  }
  const size_t per_slot = kStagingSlotBytes / out_size;
  const auto* in = static_cast<const unsigned char*>(host);
  auto* out = static_cast<unsigned char*>(t.data);
  for (size_t first = 0; first < count; first += per_slot) {
    const size_t n = std::min(per_slot, count - first);
    const int slot = staging_next_;
    staging_next_ = (staging_next_ + 1) % kStagingSlots;
    TIDE_CUDA_CHECK(cudaEventSynchronize(staging_done_[slot]));  // its last transfer has read it
    unsigned char* buffer = static_cast<unsigned char*>(staging_) + static_cast<size_t>(slot) * kStagingSlotBytes;
    // Reading the host side (page faults of a checkpoint's file mapping, conversions) is the slow part: a few
    // threads share it, slices of at least 1 MiB.
    parallel_for(static_cast<int64_t>(n), static_cast<int64_t>((size_t{1} << 20) / out_size), [&](int64_t begin, int64_t end) {
      const auto b = static_cast<size_t>(begin), e = static_cast<size_t>(end);
      convert_elements(in + (first + b) * in_size, host_dtype, buffer + b * out_size, dtype, e - b);
    }, /*max_threads=*/8);
    TIDE_CUDA_CHECK(cudaMemcpyAsync(out + first * out_size, buffer, n * out_size, cudaMemcpyHostToDevice, stream_));
    TIDE_CUDA_CHECK(cudaEventRecord(staging_done_[slot], stream_));
  }
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

using cuda::bf;
using cuda::check_row;
using cuda::typed;

// out: [T, H], table: [V, H], ids: [T]
void CudaBackend::embedding(Tensor out, const Tensor& table, const Tensor& ids) {
  TIDE_CHECK(out.dim(0) == ids.numel() && out.dim(1) == table.dim(1));
  cuda::launch_gather_rows({.out = bf(out, "embedding output"), .src = bf(table, "embedding table"),
                            .index = typed<int32_t>(ids, DType::kI32, "token ids"), .num_rows = ids.numel(),
                            .hidden = table.dim(1)},
                           stream_);
}

// out: [R, H], x: [T, H], rows: [R]
void CudaBackend::gather_rows(Tensor out, const Tensor& x, const Tensor& rows) {
  TIDE_CHECK(out.dim(0) == rows.numel() && out.dim(1) == x.dim(1));
  cuda::launch_gather_rows({.out = bf(out, "gather output"), .src = bf(x, "gather input"),
                            .index = typed<int32_t>(rows, DType::kI32, "rows"), .num_rows = rows.numel(),
                            .hidden = x.dim(1)},
                           stream_);
}

// out, x: [T, H], weight: [H]
void CudaBackend::layer_norm(Tensor out, const Tensor& x, const Tensor& weight, float eps) {
  TIDE_CHECK(out.shape == x.shape && weight.numel() == x.dim(1));
  check_row(x.dim(1), "layer_norm");
  cuda::launch_layer_norm({.out = bf(out, "layer_norm output"), .x = bf(x, "layer_norm input"),
                           .w = bf(weight, "layer_norm weight"), .num_tokens = x.dim(0), .hidden = x.dim(1),
                           .eps = eps},
                          stream_);
}

// h, a, b, out: [T, H], weight: [H]
void CudaBackend::residual_layer_norm(Tensor h, const Tensor& a, const Tensor& b, Tensor out, const Tensor& weight,
                                      float eps) {
  TIDE_CHECK(a.shape == h.shape && b.shape == h.shape && out.shape == h.shape && weight.numel() == h.dim(1));
  check_row(h.dim(1), "residual_layer_norm");
  cuda::launch_layer_norm({.out = bf(out, "layer_norm output"), .h = bf(h, "residual"), .a = bf(a, "residual input"),
                           .b = bf(b, "residual input"), .w = bf(weight, "layer_norm weight"), .num_tokens = h.dim(0),
                           .hidden = h.dim(1), .eps = eps},
                          stream_);
}

// qkv: [T, heads_total * D], positions: [T], inv_freq: [D / 2]
void CudaBackend::rope(Tensor qkv, const Tensor& positions, const Tensor& inv_freq, int64_t num_rope_heads) {
  const int64_t head_dim = 2 * inv_freq.numel();
  TIDE_CHECK(qkv.dim(0) == positions.numel() && num_rope_heads * head_dim <= qkv.dim(1));
  cuda::launch_rope({.qkv = bf(qkv, "rope input"), .positions = typed<int32_t>(positions, DType::kI32, "positions"),
                     .inv_freq = typed<float>(inv_freq, DType::kF32, "inv_freq"), .num_tokens = qkv.dim(0),
                     .row_size = qkv.dim(1), .num_rope_heads = num_rope_heads, .head_dim = head_dim},
                    stream_);
}

// out: [T, I], gate_up: [T, 2I]
void CudaBackend::silu_mul(Tensor out, const Tensor& gate_up) {
  TIDE_CHECK(gate_up.dim(1) == 2 * out.dim(1) && gate_up.dim(0) == out.dim(0));
  cuda::launch_silu_mul({.out = bf(out, "silu_mul output"), .gate_up = bf(gate_up, "gate_up"),
                         .num_tokens = out.dim(0), .inter = out.dim(1)},
                        stream_);
}

void CudaBackend::copy(Tensor out, const Tensor& x) {
  if (out.dtype != x.dtype || out.shape != x.shape) fail("cuda backend: copy between different dtypes or shapes");
  if (x.nbytes() > 0) TIDE_CUDA_CHECK(cudaMemcpyAsync(out.data, x.data, x.nbytes(), cudaMemcpyDeviceToDevice, stream_));
}

// out8: [T, K] e4m3, scales: [T] f32, x: [T, K] bf16 or f32
void CudaBackend::quantize_fp8(Tensor out8, Tensor scales, const Tensor& x) {
  TIDE_CHECK(out8.shape == x.shape && scales.numel() == x.dim(0));
  if (out8.dtype != DType::kF8E4M3) fail("cuda backend: quantize_fp8 output must be F8_E4M3");
  float* s = typed<float>(scales, DType::kF32, "quantize_fp8 scales");
  if (x.dtype == DType::kBF16 && x.dim(1) <= cuda::kMaxRowElements) {
    cuda::launch_quantize_fp8({out8.as<uint8_t>(), s, bf(x, "quantize_fp8 input"), false, x.dim(0), x.dim(1)}, stream_);
    return;
  }
  if (x.dtype != DType::kBF16 && x.dtype != DType::kF32) {
    fail("cuda backend: quantize_fp8 input must be BF16 or F32, got {}", dtype_name(x.dtype));
  }
  cuda::launch_quantize_fp8_rows({out8.as<uint8_t>(), s, x.data, x.dtype == DType::kF32, x.dim(0), x.dim(1)}, stream_);
}

// t: [n] bf16 or f32
void CudaBackend::fill_uniform(Tensor t, float center, float amplitude, uint64_t seed) {
  if (t.dtype != DType::kBF16 && t.dtype != DType::kF32) {
    fail("cuda backend: fill_uniform output must be BF16 or F32, got {}", dtype_name(t.dtype));
  }
  cuda::launch_fill_uniform({t.data, t.dtype == DType::kF32, t.numel(), center, amplitude, seed}, stream_);
}

// out8: [T, H] e4m3, scales: [T] f32, x: [T, H] bf16, weight: [H]
void CudaBackend::layer_norm_fp8(Tensor out8, Tensor scales, const Tensor& x, const Tensor& weight, float eps,
                                 Tensor /*scratch*/) {
  TIDE_CHECK(out8.shape == x.shape && scales.numel() == x.dim(0) && weight.numel() == x.dim(1));
  check_row(x.dim(1), "layer_norm_fp8");
  cuda::launch_layer_norm({.out8 = typed<uint8_t>(out8, DType::kF8E4M3, "layer_norm_fp8 output"),
                           .scales = typed<float>(scales, DType::kF32, "layer_norm_fp8 scales"),
                           .x = bf(x, "layer_norm input"), .w = bf(weight, "layer_norm weight"),
                           .num_tokens = x.dim(0), .hidden = x.dim(1), .eps = eps},
                          stream_);
}

// h, a, b: [T, H] bf16, out8: [T, H] e4m3, scales: [T] f32, weight: [H]
void CudaBackend::residual_layer_norm_fp8(Tensor h, const Tensor& a, const Tensor& b, Tensor out8, Tensor scales,
                                          const Tensor& weight, float eps, Tensor /*scratch*/) {
  TIDE_CHECK(a.shape == h.shape && b.shape == h.shape && out8.shape == h.shape && scales.numel() == h.dim(0) &&
             weight.numel() == h.dim(1));
  check_row(h.dim(1), "residual_layer_norm_fp8");
  cuda::launch_layer_norm({.out8 = typed<uint8_t>(out8, DType::kF8E4M3, "layer_norm_fp8 output"),
                           .scales = typed<float>(scales, DType::kF32, "layer_norm_fp8 scales"),
                           .h = bf(h, "residual"), .a = bf(a, "residual input"), .b = bf(b, "residual input"),
                           .w = bf(weight, "layer_norm weight"), .num_tokens = h.dim(0), .hidden = h.dim(1),
                           .eps = eps},
                          stream_);
}

// out8: [T, I] e4m3, scales: [T] f32, gate_up: [T, 2I] bf16
void CudaBackend::silu_mul_fp8(Tensor out8, Tensor scales, const Tensor& gate_up, Tensor /*scratch*/) {
  TIDE_CHECK(gate_up.dim(1) == 2 * out8.dim(1) && gate_up.dim(0) == out8.dim(0) && scales.numel() == out8.dim(0));
  check_row(out8.dim(1), "silu_mul_fp8");
  const cuda::SiluMulParams p{
      .out8 = typed<uint8_t>(out8, DType::kF8E4M3, "silu_mul_fp8 output"),
      .scales = typed<float>(scales, DType::kF32, "silu_mul_fp8 scales"), .gate_up = bf(gate_up, "gate_up"),
      .num_tokens = out8.dim(0), .inter = out8.dim(1),
      .sync = reinterpret_cast<uint32_t*>(static_cast<char*>(split_scratch_) + cuda::kSwigluSplitSyncOffset)};
  if (cuda::silu_mul_fp8_split_parts(p.num_tokens, p.inter) > 0) {
    cuda::launch_silu_mul_fp8_split(p, stream_);
  } else {
    cuda::launch_silu_mul_fp8(p, stream_);
  }
}

void CudaBackend::add(Tensor out, const Tensor& a, const Tensor& b) {
  TIDE_CHECK(a.shape == b.shape && out.shape == a.shape);
  cuda::launch_add({bf(out, "add output"), bf(a, "add input"), bf(b, "add input"), out.numel()}, stream_);
}

}  // namespace tide
