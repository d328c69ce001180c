// Small-batch bf16 matmul for decode: out[T, N] = alpha * x[T, K] w[N, K]^T with T up to kGemvMaxTokens,
// f32 accumulation, bf16 or f32 output. At these T the matmul only streams W (16 bytes per 8 weights) and
// is bound by device-memory bandwidth and, for matrices of a few tens of MB, by latency: there it is ~10%
// faster than cuBLASLt; on larger ones cuBLASLt is 1-6% faster (CudaBackend::matmul's dispatch rule has
// the figures). Non-goals: large T (cuBLASLt's GEMM), K % 8 != 0 or unaligned rows (the caller falls back
// to cuBLASLt), anything but bf16 inputs.
//
// How: every warp owns a 16-row tile of W and a range of K, and feeds the tensor cores with
// mma.m16n8k16 (bf16 in, f32 accumulate), x as the n = 8 side (T <= 8: one n-tile, zero columns past T).
// The reduction dimension may be permuted freely as long as A and B agree, so each thread loads its W
// fragments with whole 16-byte loads (8 consecutive k of rows g and g + 8) and the matching 16 bytes of
// x row g, instead of the 4-byte pieces of the canonical fragment layout; the warp-wide reduction over K
// happens inside the mma, with no shuffles. W goes through ld.global.nc.L1::no_allocate (read once), x
// through the L1 (read by every warp). A CTA is one tile: its k_split warps split K (more warps in flight
// when N has too few tiles to fill the GPU) and add their partial sums through shared memory. One tile per
// CTA keeps the work per SM even (a first version with 8-warp CTAs over several tiles left SMs with 3 and
// 4 CTAs side by side in one wave: 91% of cuBLASLt on 28672 x 4096). No allocation, no host
// synchronization: the launch can be captured into a CUDA graph.
#include <algorithm>

#include "backend/cuda/kernels.h"

namespace tide::cuda {
namespace {

constexpr int kMaxWarps = 16;         // per CTA: the most warps splitting K of one tile
constexpr int kTileRows = 16;         // M of the mma
constexpr int kTileTokens = 8;        // N of the mma: tokens per n-tile
constexpr int kChunk = 8;             // bf16 per 16-byte load
constexpr int kThreadsPerRow = 4;     // threads of an mma group sharing one row (the k side of the fragment)

struct GemvParams {
  void* out;        // [T, N] bf16 or f32
  const bf16* x;    // [T, K]
  const bf16* w;    // [N, K]
  int64_t num_tokens, n, k;
  int k_split;      // warps of the CTA, sharing its tile, each over a range of K (1 .. kMaxWarps)
  float alpha;
};

// 16 bytes of W, or zeros when !pred. Streamed: no L1 allocation, L2 fetches 256 bytes at a time (the
// warp reads a row's next 64 bytes in the next unrolled load).
__device__ __forceinline__ uint4 load_weights(const bf16* p, bool pred) {
  uint4 v;
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
      " @p ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred)));
  return v;
}

// 16 bytes of x, or zeros when !pred; through L1, since every warp of the SM reads the same x.
__device__ __forceinline__ uint4 load_input(const bf16* p, bool pred) {
  uint4 v;
  asm("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
      " @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(static_cast<int>(pred)));
  return v;
}

// d += A B, A 16 x 16 (rows g, g + 8), B 16 x 8, as mma.m16n8k16 fragments.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void store(float* out, float v) { *out = v; }
__device__ __forceinline__ void store(bf16* out, float v) { *out = __float2bfloat16(v); }

// kNTiles: n-tiles of 8 tokens (T <= 8 * kNTiles). kUnroll: 16-byte loads of each of the thread's two rows
// in flight per iteration before the first mma uses them.
template <int kNTiles, int kUnroll, typename OutT>
__global__ void __launch_bounds__(kMaxWarps * 32) gemv_kernel(const __grid_constant__ GemvParams p) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / kThreadsPerRow, c = lane % kThreadsPerRow;  // the mma's groupID, thread in group
  const int part = warp;
  const int64_t tile = blockIdx.x;

  // Rows g and g + 8 of the tile; rows past N read row N - 1 (valid memory) and are not stored.
  const int64_t row0 = tile * kTileRows + g, row1 = row0 + 8;
  const bf16* w0 = p.w + std::min(row0, p.n - 1) * p.k;
  const bf16* w1 = p.w + std::min(row1, p.n - 1) * p.k;

  // This warp's chunks of K: whole iterations of kThreadsPerRow * kUnroll chunks, the last part shorter.
  constexpr int kIterChunks = kThreadsPerRow * kUnroll;
  const int64_t num_chunks = p.k / kChunk;
  const int64_t part_chunks =
      ((num_chunks + p.k_split - 1) / p.k_split + kIterChunks - 1) / kIterChunks * kIterChunks;
  const int64_t begin = part * part_chunks;
  const int64_t end = std::min(begin + part_chunks, num_chunks);

  // The x rows this thread feeds as column g of each n-tile; zeros past T.
  const bf16* xs[kNTiles];
  bool has_x[kNTiles];
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
    const int64_t t = nt * kTileTokens + g;
    has_x[nt] = t < p.num_tokens;
    xs[nt] = p.x + (has_x[nt] ? t : 0) * p.k;
  }

  // Two accumulator sets (even and odd u) halve the chain of dependent mmas between loads.
  float acc[kNTiles][4] = {}, acc_odd[kNTiles][4] = {};
  for (int64_t base = begin; base < end; base += kIterChunks) {
    uint4 a0[kUnroll], a1[kUnroll], b[kUnroll][kNTiles];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t chunk = base + c + kThreadsPerRow * u;  // 4 threads read 64 contiguous bytes of a row
      const bool in = chunk < end;
      a0[u] = load_weights(w0 + chunk * kChunk, in);
      a1[u] = load_weights(w1 + chunk * kChunk, in);
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) b[u][nt] = load_input(xs[nt] + chunk * kChunk, in && has_x[nt]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      // Elements 0-1 and 2-3 of the chunk play k = 2c, 2c + 1 and 2c + 8, 2c + 9 of one mma, elements 4-7
      // the same of a second: the same permutation of K on both sides.
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        float (&d)[4] = u % 2 == 0 ? acc[nt] : acc_odd[nt];
        mma_bf16(d, a0[u].x, a1[u].x, a0[u].y, a1[u].y, b[u][nt].x, b[u][nt].y);
        mma_bf16(d, a0[u].z, a1[u].z, a0[u].w, a1[u].w, b[u][nt].z, b[u][nt].w);
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[nt][j] += acc_odd[nt][j];

  if (p.k_split > 1) {
    // Partial sums of the tile's warps into warp 0. [warp][value][lane]: conflict-free.
    extern __shared__ float partial[];
    constexpr int kValues = kNTiles * 4;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int j = 0; j < 4; ++j) partial[(warp * kValues + nt * 4 + j) * 32 + lane] = acc[nt][j];
    __syncthreads();
    if (warp != 0) return;
    for (int s = 1; s < p.k_split; ++s)
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[nt][j] += partial[(s * kValues + nt * 4 + j) * 32 + lane];
  }

  // acc[nt]: (row g, tokens 2c, 2c + 1), (row g + 8, tokens 2c, 2c + 1) of n-tile nt.
  OutT* out = static_cast<OutT*>(p.out);
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t t = nt * kTileTokens + 2 * c + (j & 1);
      const int64_t row = j < 2 ? row0 : row1;
      if (t < p.num_tokens && row < p.n) store(out + t * p.n + row, p.alpha * acc[nt][j]);
    }
}

template <int kNTiles, int kUnroll>
void launch_tiles(const GemvParams& p, bool out_f32, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((p.n + kTileRows - 1) / kTileRows);
  const unsigned threads = 32u * static_cast<unsigned>(p.k_split);
  const size_t smem = p.k_split > 1 ? sizeof(float) * static_cast<size_t>(p.k_split) * kNTiles * 4 * 32 : 0;
  if (out_f32) {
    gemv_kernel<kNTiles, kUnroll, float><<<blocks, threads, smem, stream>>>(p);
  } else {
    gemv_kernel<kNTiles, kUnroll, bf16><<<blocks, threads, smem, stream>>>(p);
  }
}

}  // namespace

bool gemv_supports(int64_t num_tokens, int64_t k, const void* x, const void* w) {
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  return num_tokens >= 1 && num_tokens <= kGemvMaxTokens && k % kChunk == 0 && aligned(x) && aligned(w);
}

GemvConfig gemv_default_config(int64_t num_tokens, int64_t n, int64_t k, int num_sms) {
  // Fewest rounds of loads over the SMs' warp slots (32 per SM at these register counts): warps of equal
  // work run ceil(warps / slots) after one another, each over K / k_split; no warp with fewer than 512 k.
  const int64_t num_tiles = (n + kTileRows - 1) / kTileRows;
  const int64_t slots = int64_t{num_sms} * 32;
  const auto cost = [&](int64_t ks) { return (num_tiles * ks + slots - 1) / slots * ((k + ks - 1) / ks); };
  GemvConfig config;
  for (int ks = 2; ks <= kMaxWarps && k / ks >= 512; ks *= 2) {
    if (cost(ks) < cost(config.k_split)) config.k_split = ks;
  }
  config.unroll = 8;
  return config;
}

void launch_gemv(void* out, bool out_f32, const bf16* x, const bf16* w, int64_t num_tokens, int64_t n, int64_t k,
                 float alpha, GemvConfig config, cudaStream_t stream) {
  if (num_tokens == 0 || n == 0) return;
  const GemvParams p{out, x, w, num_tokens, n, k, config.k_split, alpha};
  const bool deep = config.unroll >= 8;  // 8 loads per row in flight instead of 4 (2 past 16 tokens)
  if (num_tokens <= 8) {
    deep ? launch_tiles<1, 8>(p, out_f32, stream) : launch_tiles<1, 4>(p, out_f32, stream);
  } else if (num_tokens <= 16) {
    deep ? launch_tiles<2, 8>(p, out_f32, stream) : launch_tiles<2, 4>(p, out_f32, stream);
  } else {
    deep ? launch_tiles<4, 4>(p, out_f32, stream) : launch_tiles<4, 2>(p, out_f32, stream);
  }
}

}  // namespace tide::cuda
