// Per-token FP8 quantization on the CUDA backend: one block per row holds the row in registers
// (row_tile.cuh), finds its largest magnitude, then writes the scale and the codes with core/fp8.h's
// arithmetic (one correctly rounded division, then the integer e4m3 rounding), so the codes equal the CPU
// reference's bit for bit. Rows the registers do not hold, and f32 rows (weights of F16 / F32 checkpoints
// quantized at load), take a kernel that reads the row twice from memory instead. Also fused with the SwiGLU
// activation that feeds the down projection: the bf16 activation is never written.
#include "backend/cuda/activation.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/row_tile.cuh"

namespace tide::cuda {
namespace {

template <int kThreads, int kChunks>
__global__ void __launch_bounds__(kThreads)
    quantize_fp8_kernel(uint8_t* __restrict__ out, float* __restrict__ scales, const bf16* __restrict__ x,
                        int64_t cols, bool vec) {
  begin_dependent_kernel();
  __shared__ float shared[kThreads / 32];
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * cols;
  RowTile<kThreads, kChunks> row;
  row.load(x + offset, cols, vec);
  quantize_tile(row, out + offset, scales + blockIdx.x, cols, vec, shared);
}

__device__ __forceinline__ float to_float(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(float v) { return v; }

// One CTA per row of any length: the row's largest magnitude in a first pass, the codes in a second (core/fp8.h's
// e4m3_from_float after one rounded division: the CPU reference's function itself). Loading weights is what
// runs it, bound by memory bandwidth; the second pass mostly reads the row from L2.
constexpr int kRowsThreads = 256;
template <typename T>
__global__ void __launch_bounds__(kRowsThreads)
    quantize_fp8_rows_kernel(uint8_t* __restrict__ out, float* __restrict__ scales, const T* __restrict__ x,
                             int64_t cols) {
  begin_dependent_kernel();
  __shared__ float shared[kRowsThreads / 32];
  const T* row = x + static_cast<int64_t>(blockIdx.x) * cols;
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < cols; i += kRowsThreads) amax = fmaxf(amax, fabsf(to_float(row[i])));
  const float scale = fp8::scale_for_amax(block_max<kRowsThreads>(amax, shared));
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  uint8_t* q = out + static_cast<int64_t>(blockIdx.x) * cols;
  for (int64_t i = threadIdx.x; i < cols; i += kRowsThreads) q[i] = fp8::e4m3_from_float(__fdiv_rn(to_float(row[i]), scale));
}

template <int kThreads, int kChunks>
__global__ void __launch_bounds__(kThreads)
    silu_mul_fp8_kernel(uint8_t* __restrict__ out, float* __restrict__ scales, const bf16* __restrict__ gate_up,
                        int64_t inter, bool vec) {
  begin_dependent_kernel();
  __shared__ float shared[kThreads / 32];
  const bf16* gate = gate_up + static_cast<int64_t>(blockIdx.x) * 2 * inter;
  RowTile<kThreads, kChunks> g, u;
  g.load(gate, inter, vec);
  u.load(gate + inter, inter, vec);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (decltype(g)::index(c) >= inter) break;  // chunks past the row stay 0
#pragma unroll
    for (int j = 0; j < 8; ++j) g.set(c, j, silu_mul_value(g.at(c, j), u.at(c, j)));
  }
  quantize_tile(g, out + static_cast<int64_t>(blockIdx.x) * inter, scales + blockIdx.x, inter, vec, shared);
}

// silu_mul_fp8 for many rows longer than the register tiles of with_row_tile(n, rows) (Command-A's MLP, 36864
// elements): a block of kLongThreads streams its row's gate and up in 16-byte chunks, keeps the bf16 activation
// in shared memory (2 bytes an element: three of Command-A's rows per SM) and its largest magnitude, then
// quantizes from there. Each thread reads back only the chunks it wrote. The same values, maximum and
// arithmetic as silu_mul_fp8_kernel: the same bits. Rows of a multiple of 8 elements, 16-byte aligned.
constexpr int kLongThreads = 256;
constexpr int64_t kLongMaxElements = 49152;  // 96 KB of activation: two blocks per SM at least
__global__ void __launch_bounds__(kLongThreads)
    silu_mul_fp8_long_kernel(uint8_t* __restrict__ out, float* __restrict__ scales, const bf16* __restrict__ gate_up,
                             int64_t inter) {
  begin_dependent_kernel();
  extern __shared__ uint4 act[];  // the row's activation, 8 bf16 per chunk
  __shared__ float shared[kLongThreads / 32];
  const bf16* gate = gate_up + static_cast<int64_t>(blockIdx.x) * 2 * inter;
  const int chunks = static_cast<int>(inter / 8);
  float amax = 0.0f;
#pragma unroll 6
  for (int c = threadIdx.x; c < chunks; c += kLongThreads) {
    const uint4 r = silu_mul8(*reinterpret_cast<const uint4*>(gate + 8 * c),
                              *reinterpret_cast<const uint4*>(gate + inter + 8 * c));
    const auto* rv = reinterpret_cast<const bf16*>(&r);
#pragma unroll
    for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(__bfloat162float(rv[j])));
    act[c] = r;
  }
  const float scale = fp8::scale_for_amax(block_max<kLongThreads>(amax, shared));
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
  uint8_t* q = out + static_cast<int64_t>(blockIdx.x) * inter;
#pragma unroll 4
  for (int c = threadIdx.x; c < chunks; c += kLongThreads) {
    const uint4 r = act[c];
    const auto* rv = reinterpret_cast<const bf16*>(&r);
    uint8_t codes[8];
    encode_e4m3x8([&](int j) { return __bfloat162float(rv[j]); }, scale, codes);
    *reinterpret_cast<uint2*>(q + 8 * c) = pack_codes8(codes);
  }
}

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

__device__ __forceinline__ uint64_t load_relaxed(const unsigned long long* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_relaxed(unsigned long long* p, uint64_t v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// The largest of `local` over the `parts` CTAs of a token, in every thread of warp 0 (the other warps pass 0
// and get 0). Each CTA publishes (epoch + 1, its maximum) in its own 64-bit slot with one store, then waits
// until every slot of the token holds epoch + 1: no count, no fence, no atomic, one round trip when the CTAs
// arrive together (under the down projection's saturating stream each fence or atomic costs microseconds, on
// the MLP chain's serial path: a count and generation barrier made decode steps slower).
// The token's epoch advances only once every slot holds the new one, so after every CTA has read it; a slot
// left by an earlier launch (also of another shape) holds an older epoch. The next launch reads the epoch
// after its grid dependency wait, once this kernel has completed. Waiting on the other CTAs is safe: the kernel
// lets the next one launch (launch.cuh) before this, but that launch happens only once every CTA of the grid
// has allowed it, that is once all of them are resident, so none waits behind the next kernel's CTAs.
__device__ float token_max(uint32_t* epoch, unsigned long long* slots, uint32_t part, uint32_t parts, float local) {
  if (threadIdx.x >= 32) return 0.0f;
  uint32_t next = 0;
  if (threadIdx.x == 0) {
    next = *reinterpret_cast<volatile uint32_t*>(epoch) + 1;
    store_relaxed(slots + part, uint64_t{next} << 32 | __float_as_uint(local));
  }
  next = __shfl_sync(0xffffffffu, next, 0);
  float m = 0.0f;
  for (uint32_t i = threadIdx.x; i < parts; i += 32) {
    uint64_t v = load_relaxed(slots + i);
    while (static_cast<uint32_t>(v >> 32) != next) {
      __nanosleep(20);
      v = load_relaxed(slots + i);
    }
    m = fmaxf(m, __uint_as_float(static_cast<uint32_t>(v)));
  }
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (part == 0 && threadIdx.x == 0) *reinterpret_cast<volatile uint32_t*>(epoch) = next;
  return m;
}

// silu_mul_fp8 for few tokens: CTA (p, t) takes 8 kThreads elements of token t's row, so the row's
// activation and codes are computed on `gridDim.x` SMs instead of one; the CTAs of a token exchange their
// largest magnitudes through `sync` (kernels.h, kSwigluSplitSyncOffset) and then quantize with the row's
// scale: the same bits as silu_mul_fp8_kernel (a maximum does not depend on the order it is taken in).
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    silu_mul_fp8_split_kernel(uint8_t* __restrict__ out, float* __restrict__ scales,
                              const bf16* __restrict__ gate_up, int64_t inter, bool vec, uint32_t* sync) {
  using Tile = RowTile<kThreads, 1>;
  __shared__ float shared[kThreads / 32];
  __shared__ float row_scale;
  const uint32_t parts = gridDim.x, part = blockIdx.x, token = blockIdx.y;
  const int64_t first = static_cast<int64_t>(part) * kThreads * 8;
  const bf16* gate = gate_up + static_cast<int64_t>(token) * 2 * inter;
  // The down projection after this kernel starts copying its weights now (fp8_stream_matmul.cu), while the
  // CTAs exchange their maxima, rather than after that exchange.
  begin_dependent_kernel();
  // This CTA's slice as a one-chunk tile: thread t holds elements first + 8 t .. first + 8 t + 7.
  const int64_t left = inter - first;
  Tile g, u;
  g.load(gate + first, left, vec);
  u.load(gate + inter + first, left, vec);
#pragma unroll
  for (int j = 0; j < 8; ++j) g.set(0, j, silu_mul_value(g.at(0, j), u.at(0, j)));
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(g.at(0, j)));  // elements past the row are 0
  amax = block_max<kThreads>(amax, shared);
  auto* slots = reinterpret_cast<unsigned long long*>(sync + kSwigluSplitEpochWords) + token * kSwigluSplitMaxParts;
  const float m = token_max(sync + token, slots, part, parts, amax);
  if (threadIdx.x == 0) row_scale = fp8::scale_for_amax(m);
  __syncthreads();
  if (part == 0 && threadIdx.x == 0) scales[token] = row_scale;
  // The tile's own quantization, with the row's scale in place of the tile's maximum.
  quantize_tile_with_scale(g, out + static_cast<int64_t>(token) * inter + first, row_scale, left, vec);
}

}  // namespace

void launch_quantize_fp8(const QuantizeFp8Params& p, cudaStream_t stream) {
  if (p.rows <= 0) return;
  TIDE_CHECK(!p.x_f32);
  const auto* x = static_cast<const bf16*>(p.x);
  const bool vec = p.cols % 8 == 0 && aligned(p.out) && aligned(x);
  with_row_tile(p.cols, p.rows, [&](auto threads, auto chunks) {
    launch_kernel(quantize_fp8_kernel<threads.value, chunks.value>, static_cast<unsigned>(p.rows), threads.value, 0,
                  stream, p.out, p.scales, x, p.cols, vec);
  });
}

void launch_quantize_fp8_rows(const QuantizeFp8Params& p, cudaStream_t stream) {
  if (p.rows <= 0) return;
  if (p.x_f32) {
    launch_kernel(quantize_fp8_rows_kernel<float>, static_cast<unsigned>(p.rows), kRowsThreads, 0, stream, p.out,
                  p.scales, static_cast<const float*>(p.x), p.cols);
  } else {
    launch_kernel(quantize_fp8_rows_kernel<bf16>, static_cast<unsigned>(p.rows), kRowsThreads, 0, stream, p.out,
                  p.scales, static_cast<const bf16*>(p.x), p.cols);
  }
}

int silu_mul_fp8_split_parts(int64_t num_tokens, int64_t inter) {
  const int64_t parts = (inter + kSwigluSplitElements - 1) / kSwigluSplitElements;
  // At most 32 CTAs per token (Command-A's MLP takes 18), all of the grid on the GPU at once.
  return num_tokens >= 1 && num_tokens <= kSwigluSplitMaxTokens && parts <= kSwigluSplitMaxParts
             ? static_cast<int>(parts)
             : 0;
}

void launch_silu_mul_fp8_split(const SiluMulParams& p, cudaStream_t stream) {
  const int parts = silu_mul_fp8_split_parts(p.num_tokens, p.inter);
  TIDE_CHECK(parts > 0);
  const bool vec = p.inter % 8 == 0 && aligned(p.out8) && aligned(p.gate_up);
  launch_kernel(silu_mul_fp8_split_kernel<kSwigluSplitElements / 8>,
                dim3(static_cast<unsigned>(parts), static_cast<unsigned>(p.num_tokens)), kSwigluSplitElements / 8, 0,
                stream, p.out8, p.scales, p.gate_up, p.inter, vec, p.sync);
}

void launch_silu_mul_fp8(const SiluMulParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return;
  const bool vec = p.inter % 8 == 0 && aligned(p.out8) && aligned(p.gate_up);
  if (vec && p.num_tokens >= kManyRows && p.inter > kManyRowsMaxElements && p.inter <= kLongMaxElements) {
    static const bool configured = (cudaFuncSetAttribute(silu_mul_fp8_long_kernel,
                                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                         static_cast<int>(kLongMaxElements * 2)),
                                    true);
    (void)configured;
    launch_kernel(silu_mul_fp8_long_kernel, static_cast<unsigned>(p.num_tokens), kLongThreads,
                  static_cast<size_t>(p.inter * 2), stream, p.out8, p.scales, p.gate_up, p.inter);
    return;
  }
  with_row_tile(p.inter, p.num_tokens, [&](auto threads, auto chunks) {
    launch_kernel(silu_mul_fp8_kernel<threads.value, chunks.value>, static_cast<unsigned>(p.num_tokens),
                  threads.value, 0, stream, p.out8, p.scales, p.gate_up, p.inter, vec);
  });
}

}  // namespace tide::cuda
