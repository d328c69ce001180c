// FP8 matmul for few tokens (decode): out[T, N] = alpha * x_scales[t] * w_scales[n] * (x8[T, K] . w8[N, K]^T)
// with T <= 16, bound by reading the weights once. cuBLASLt's FP8 kernels are tiled for large T and read a
// decode-sized weight at about half the bandwidth its bf16 GEMV reaches; this kernel streams the weight rows
// straight into tensor-core fragments.
//
// Layout of the work: a CTA owns kMTiles x 16 weight rows; its kWarps warps split K. Per step a warp reads 64
// bytes of K from each of its rows: lane (g, q) (g = lane / 4, q = lane % 4) loads the 16 bytes at 16 q of
// rows g and g + 8 of an m-tile, and the same 16 bytes of K of token g (and g + 8 with two n-tiles). Those
// registers feed two mma.sync.m16n8k32 e4m3 instructions directly: the fragments' K order is permuted the
// same way for A (weights) and B (tokens), which a dot product does not see. Each step's two products start
// from zero and are added to f32 accumulators (the tensor core's own accumulation is not full f32 on Hopper's
// FP8 path); the warps' partial sums meet in shared memory and the scales are applied once per output.
//
// The same kernel serves bf16 weights and tokens without scales (launch_bf16_small_matmul): 64 bytes of K are
// then 32 values, and the two m16n8k16 bf16 instructions take their fragments from the same registers (a
// lane's 16 bytes of a row: values 0-3 the first product's K, 4-7 the second's). On small matrices (a draft
// model's, the bundled demo's) it is faster than cuBLASLt's kernels, whose fixed cost per launch is most of
// theirs; the engine dispatches it there (cuda::bf16_small_matmul_preferred).
#include <cuda_bf16.h>

#include <array>
#include <utility>

#include "backend/cuda/fp8_mma.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace tide::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kStepBytes = 64;

// A weight load that bypasses L1 (each weight byte is read once) and prefetches 256 bytes into L2.
__device__ __forceinline__ uint4 load_weight(const uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// kMTiles: 16-row weight tiles per CTA; kNTiles: 8-token tiles (T <= 8 kNTiles); kU: 64-byte steps of K in
// flight per warp. kBf16: x8 and w8 hold bf16 values, k counts bytes (2 per value), and there are no scales.
template <int kMTiles, int kNTiles, int kU, typename Out, bool kBf16 = false>
__global__ void __launch_bounds__(kWarps * 32)
    fp8_small_matmul_kernel(Out* __restrict__ out, const uint8_t* __restrict__ x8, const float* __restrict__ x_scales,
                            const uint8_t* __restrict__ w8, const float* __restrict__ w_scales, float alpha,
                            int num_tokens, int k, int n) {
  constexpr int kRows = 16 * kMTiles;
  constexpr int kCols = 8 * kNTiles;
  __shared__ float partial[kWarps][kRows][kCols];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int row0 = static_cast<int>(blockIdx.x) * kRows;
  // The CTA's tokens: group blockIdx.y of kCols (more than one group only on bf16: up to 256 tokens; FP8's
  // 16 fit one, and its code is left as it was without groups).
  const int token0 = kBf16 ? static_cast<int>(blockIdx.y) * kCols : 0;
  x8 += static_cast<int64_t>(token0) * k;
  if constexpr (!kBf16) x_scales += token0;
  out += static_cast<int64_t>(token0) * n;
  num_tokens -= token0;

  // Rows past n read the last row (their results are never written); tokens past T read nothing.
  const uint8_t* w_rows[kMTiles][2];
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      w_rows[m][h] = w8 + static_cast<int64_t>(min(row0 + 16 * m + 8 * h + g, n - 1)) * k + 16 * q;
    }
  }
  const TokenRows<kNTiles> tokens(x8, num_tokens, k, g, q);

  const int steps = (k + kStepBytes - 1) / kStepBytes;
  const int per_warp = (steps + kWarps - 1) / kWarps;
  const int begin = warp * per_warp, end = min(steps, begin + per_warp);

  // No allow_dependent_launch(): the next kernel is scheduled as this one's CTAs exit (launch.cuh). Loading
  // the first weights before the wait measured no faster (R7B FP8 decode, H200).
  grid_dependency_wait();

  float acc[kMTiles][kNTiles][4] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int s = begin; s < end; s += kU) {
    uint4 w[kU][kMTiles][2], x[kU][kNTiles];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int offset = (s + u) * kStepBytes;
      // K is a multiple of 16, so a lane's 16 bytes are all inside K or all past it.
      const bool inside = s + u < end && offset + 16 * q < k;
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
        for (int h = 0; h < 2; ++h) w[u][m][h] = inside ? load_weight(w_rows[m][h] + offset) : zero;
      }
#pragma unroll
      for (int j = 0; j < kNTiles; ++j) {
        x[u][j] = inside && tokens.has[j] ? __ldg(reinterpret_cast<const uint4*>(tokens.row[j] + offset)) : zero;
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          // A fragment: a0 / a2 row g, a1 / a3 row g + 8; B fragment: token g. Bytes 0-7 of each lane's 16
          // are the first product's K, bytes 8-15 the second's.
          const uint4& lo = w[u][m][0];
          const uint4& hi = w[u][m][1];
          float d0[4], d1[4];
          if constexpr (kBf16) {
            mma_bf16(d0, lo.x, hi.x, lo.y, hi.y, x[u][j].x, x[u][j].y);
            mma_bf16(d1, lo.z, hi.z, lo.w, hi.w, x[u][j].z, x[u][j].w);
          } else {
            mma_e4m3(d0, lo.x, hi.x, lo.y, hi.y, x[u][j].x, x[u][j].y);
            mma_e4m3(d1, lo.z, hi.z, lo.w, hi.w, x[u][j].z, x[u][j].w);
          }
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[m][j][i] += d0[i] + d1[i];
        }
      }
    }
  }

  // Accumulator i of lane (g, q): row g (+8 for i >= 2), token 2q + (i & 1) of its tiles.
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp][16 * m + g + 8 * (i / 2)][8 * j + 2 * q + (i & 1)] = acc[m][j][i];
    }
  }
  __syncthreads();
  // Consecutive threads take consecutive rows of one token: out's [T, N] rows are written in runs.
  for (int i = threadIdx.x; i < kRows * kCols; i += kWarps * 32) {
    const int token = i / kRows, r = i % kRows, row = row0 + r;
    if (token >= num_tokens || row >= n) continue;
    float sum = 0.0f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) sum += partial[v][r][token];
    const float scale = kBf16 ? alpha : alpha * x_scales[token] * w_scales[row];
    out[static_cast<int64_t>(token) * n + row] = to_out<Out>(scale * sum);
  }
}

// p.k counts bytes of a row: K values of FP8, 2 K of bf16.
template <int kMTiles, int kNTiles, int kU, typename Out, bool kBf16>
void launch(Out* out, const Fp8SmallMatmul& p, cudaStream_t stream) {
  const int64_t rows_per_cta = 16 * kMTiles, tokens_per_cta = 8 * kNTiles;
  const dim3 grid(static_cast<unsigned>((p.n + rows_per_cta - 1) / rows_per_cta),
                  static_cast<unsigned>((p.num_tokens + tokens_per_cta - 1) / tokens_per_cta));
  launch_kernel(fp8_small_matmul_kernel<kMTiles, kNTiles, kU, Out, kBf16>, grid, kWarps * 32, 0, stream,
      out, p.x8, p.x_scales, p.w8, p.w_scales, p.alpha, static_cast<int>(p.num_tokens), static_cast<int>(p.k),
      static_cast<int>(p.n));
}

// The register-fed kernel's shapes: 16-row m-tiles per CTA, 8-token n-tiles, 64-byte steps in flight per
// warp. More in flight costs registers (fewer CTAs per SM); bigger CTAs read the activations from L2 less
// often. The dispatch picks among those whose n-tiles suit the tokens (choose_shape); a forced variant v <
// kNumShapes is kShapes[v].
struct Shape {
  int m_tiles, n_tiles, unroll;
};
constexpr Shape kShapes[] = {{1, 1, 4}, {1, 1, 8}, {2, 1, 4}, {1, 2, 4}, {2, 2, 4}};
constexpr int kNumShapes = sizeof(kShapes) / sizeof(kShapes[0]);

template <typename Out, bool kBf16, int... kShape>
void launch_shape(int shape, Out* out, const Fp8SmallMatmul& p, cudaStream_t stream,
                  std::integer_sequence<int, kShape...>) {
  ((shape == kShape
        ? launch<kShapes[kShape].m_tiles, kShapes[kShape].n_tiles, kShapes[kShape].unroll, Out, kBf16>(out, p, stream)
        : void()),
   ...);
}

// Resident CTAs per SM of each shape (from the compiled kernels' registers), asked once per process.
template <typename Out, bool kBf16, int... kShape>
std::array<int, kNumShapes> occupancies(std::integer_sequence<int, kShape...>) {
  std::array<int, kNumShapes> o{};
  auto ask = [&](int i, const void* kernel) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o[i], kernel, kWarps * 32, 0) != cudaSuccess || o[i] < 1) o[i] = 1;
  };
  (ask(kShape, reinterpret_cast<const void*>(fp8_small_matmul_kernel<kShapes[kShape].m_tiles,
                                                                    kShapes[kShape].n_tiles, kShapes[kShape].unroll,
                                                                    Out, kBf16>)),
   ...);
  return o;
}

template <typename Out, bool kBf16>
int ctas_per_sm(int shape) {
  static const std::array<int, kNumShapes> occupancy =
      occupancies<Out, kBf16>(std::make_integer_sequence<int, kNumShapes>());
  return occupancy[static_cast<size_t>(shape)];
}

bool shape_fits(int shape, int64_t num_tokens) {
  // One n-tile holds 8 tokens; two n-tiles for more (not used for 8 or fewer: twice the MMAs for nothing).
  return kShapes[shape].n_tiles == (num_tokens <= 8 ? 1 : 2);
}

// The shape whose grid fills its waves best: CTAs of one weight-row tile each, resident `ctas_per_sm` at a
// time per SM; a last wave that is mostly empty leaves SMs without loads in flight (R7B's gate_up at one
// token: 2.3 waves of 32-row CTAs, the last mostly empty). Ties go to more steps in flight.
template <typename Out, bool kBf16>
int choose_shape(const Fp8SmallMatmul& p, int num_sms) {
  int best = -1;
  double best_fill = 0;
  for (int v = 0; v < kNumShapes; ++v) {
    if (!shape_fits(v, p.num_tokens)) continue;
    const int64_t rows = 16 * kShapes[v].m_tiles, tokens = 8 * kShapes[v].n_tiles;
    const int64_t ctas = (p.n + rows - 1) / rows * ((p.num_tokens + tokens - 1) / tokens);
    const int64_t slots = static_cast<int64_t>(ctas_per_sm<Out, kBf16>(v)) * num_sms;
    const int64_t waves = (ctas + slots - 1) / slots;
    const double fill = static_cast<double>(ctas) / static_cast<double>(waves * slots);
    if (best < 0 || fill > best_fill + 0.02 ||
        (fill > best_fill - 0.02 && kShapes[v].unroll > kShapes[best].unroll)) {
      best = v;
      best_fill = fill;
    }
  }
  return best;
}

template <typename Out, bool kBf16 = false>
void dispatch(Out* out, const Fp8SmallMatmul& p, int num_sms, cudaStream_t stream) {
  const int shape = p.variant >= 0 && p.variant < kNumShapes && shape_fits(p.variant, p.num_tokens)
                        ? p.variant
                        : choose_shape<Out, kBf16>(p, num_sms);
  launch_shape<Out, kBf16>(shape, out, p, stream, std::make_integer_sequence<int, kNumShapes>());
}

// The streaming kernel's shape (fp8_stream_matmul.cu) the dispatch ships with: every FP8 matrix at every token
// count the kernel takes (up to 16) streams with tensor-map copies, up to 2 CTAs per SM, on 2 or 4 stages by
// the length of a CTA's stream (R7B 2, Command-A 4: fp8_stream_matmul.cu). In the decode step qkv then streams
// beside gate_up (R7B: 128 CTAs of 3 whole tiles, one per SM beside gate_up's two: stream_k_grid), so RoPE and
// the decode attention run beside gate_up on the SMs qkv's CTAs leave instead of after it; and R7B's CTAs hold
// 35 KB of shared memory, so the attention chain's CTAs fit beside them. Every R7B decode point up to 16
// tokens got faster than with the register-fed qkv and o, whose CTAs each hold half an SM's registers so that
// nothing of the other stream runs beside them (R7B on an H100: steps 7-11% faster at 9-16 x 1K, 3% at 16 x
// 32K); gate_up with more stages, or at one CTA per SM, was slower. kStreamMoreTokens (4 stages), what down
// and gate_up took at 9-16 tokens before, stays among the forced variants. The step times behind each choice
// are in docs/perf-log/2026-12.md (the 2026-12-03 entries of 4f7b291, 0151337 and bc6ae84, and 2026-12-06).
constexpr Fp8StreamShape kStreamFewTokens{.tensor_map = true, .stages = 0, .ctas_per_sm = 2};
constexpr Fp8StreamShape kStreamMoreTokens{.tensor_map = true, .stages = 4, .ctas_per_sm = 2};

// The streaming shapes a forced variant reaches (tests, benchmarks: the --fp8-variant sweep of tide_bench),
// numbered after the register-fed ones: variant kNumShapes + i is kStreamShapes[i].
constexpr Fp8StreamShape kStreamShapes[] = {{false, 4, 2}, {false, 3, 2}, {false, 8, 1}, kStreamMoreTokens,
                                            {true, 6, 2},  {true, 8, 1},  {true, 2, 2},  kStreamFewTokens};
constexpr int kNumStreamShapes = sizeof(kStreamShapes) / sizeof(kStreamShapes[0]);

// The streaming shape for `p`: the forced variant's, or where the dispatch (variant -1) streams, the shipped
// one; null for the register-fed kernel.
const Fp8StreamShape* stream_shape(const Fp8SmallMatmul& p) {
  if (p.variant >= kNumShapes && p.variant < kNumShapes + kNumStreamShapes) {
    return &kStreamShapes[p.variant - kNumShapes];
  }
  return p.variant == -1 ? &kStreamFewTokens : nullptr;
}

}  // namespace

int fp8_small_matmul_num_variants() { return kNumShapes + kNumStreamShapes; }

bool fp8_small_matmul_supports(int64_t num_tokens, int64_t k, int64_t n) {
  return num_tokens >= 1 && num_tokens <= kFp8SmallMatmulMaxTokens && k > 0 && k % 16 == 0 && n > 0 &&
         k <= (int64_t{1} << 30) && n <= (int64_t{1} << 30);
}

void launch_fp8_small_matmul(const Fp8SmallMatmul& p, int num_sms, cudaStream_t stream) {
  if (const Fp8StreamShape* shape = stream_shape(p)) {
    launch_fp8_stream_matmul(p, *shape, num_sms, stream);
  } else if (p.out_f32) {
    dispatch(static_cast<float*>(p.out), p, num_sms, stream);
  } else {
    dispatch(static_cast<bf16*>(p.out), p, num_sms, stream);
  }
}

bool bf16_small_matmul_supports(int64_t num_tokens, int64_t k, int64_t n) {
  return num_tokens >= 1 && num_tokens <= kBf16SmallMatmulMaxTokens && k > 0 && k % 8 == 0 && n > 0 &&
         k <= (int64_t{1} << 29) && n <= (int64_t{1} << 30);
}

void launch_bf16_small_matmul(const Bf16SmallMatmul& m, int num_sms, cudaStream_t stream) {
  Fp8SmallMatmul p{m.out, m.out_f32, reinterpret_cast<const uint8_t*>(m.x), nullptr,
                   reinterpret_cast<const uint8_t*>(m.w), nullptr, m.alpha, m.num_tokens, 2 * m.k, m.n};
  if (p.out_f32) {
    dispatch<float, true>(static_cast<float*>(p.out), p, num_sms, stream);
  } else {
    dispatch<bf16, true>(static_cast<bf16*>(p.out), p, num_sms, stream);
  }
}

}  // namespace tide::cuda
