// FP8 matmul for decode batches of 17-256 tokens on Hopper's warpgroup instructions: the product of
// fp8_small_matmul.cu, out[T, N] = alpha * x_scales[t] * w_scales[n] * sum_k x8[t][k] w8[n][k], bound by
// reading the weights once up to about 128 tokens and by the tensor cores above.
//
// The product is computed transposed (out^T = W x^T): weight rows are wgmma's M (64 per consumer warpgroup)
// and tokens its N (32, 64 or 128 per instruction, padded), so a decode batch fills the instruction's wide side
// instead of wasting most of a 64-row tile, and both operands are K-major, the only layout wgmma takes for
// e4m3. A CTA is two consumer warpgroups and a producer warpgroup (registers moved to the consumers with
// setmaxnreg), whose one thread copies each
// stage, 128 weight rows x 128 bytes of K and the tokens' same 128 bytes, with two tensor-map copies into the
// 128-byte-swizzled layout wgmma reads (rows and tokens past the matrix zero-filled); weights are copied
// before the grid dependency wait (no kernel writes them), activations after it. Each consumer multiplies its
// 64 rows by every token: a stage's four m64nNk32 products accumulate in temporaries (two of 64 bytes of K
// each with up to 128 tokens, one of 128 bytes with more: Config::kTemps) that the thread then adds to its f32
// sums. Hopper's tensor cores add FP8 products with about 13 bits (wgmma.cuh), so a sum is kept in the tensor
// core over at most 128 bytes of K, as cuBLASLt's FP8 kernels promote theirs: the result is
// within about 2^-13 of the terms' magnitude, like cuBLASLt's, where the mma.sync kernels
// (fp8_small_matmul.cu) reach f32's rounding.
//
// Work split: stream-K as fp8_stream_matmul.cu (backend/stream_k.h), with units of one 128-row tile x 128
// bytes of K and one CTA per SM: a CTA's range covers whole tiles, written directly, and at most two split
// ones, whose partial sums each consumer warpgroup stores in its scratch slot (as its registers hold them, so
// the stores and the loads that sum them are coalesced); the last CTA to arrive adds the slots in CTA order,
// so the result does not depend on which CTA finishes first.
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/fp8_mma.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/tensor_map.h"
#include "backend/cuda/wgmma.cuh"
#include "backend/stream_k.h"

namespace tide::cuda {
namespace {

constexpr int kTileRows = 128;  // weight rows per tile, 64 per consumer warpgroup
constexpr int kChunk = 128;     // bytes of K per stage: one 128-byte swizzled row of each operand
constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (kConsumers + 1);  // the consumer warpgroups, then the producer's
constexpr int kProducerRegisters = 40;
constexpr int kConsumerRegisters = 232;  // 128 x 40 + 256 x 232 <= 64K registers per SM
constexpr int kWeightBytes = kTileRows * kChunk;
constexpr int kStageBudget = 192 * 1024;  // shared memory for stages (227 KB per CTA at most)

// kN tokens per instruction, kHalves instructions' worth of tokens per tile (up to 256 tokens with 128).
template <int kN, int kHalves>
struct Config {
  static_assert(kN == 32 || kN == 64 || kN == 80 || kN == 96 || kN == 128);
  static constexpr int kTokens = kN * kHalves;
  static constexpr int kStageBytes = kWeightBytes + kTokens * kChunk;
  static constexpr int kStages = std::min(6, kStageBudget / kStageBytes);
  static constexpr int kAcc = kN / 2;  // accumulator registers per instruction per thread
  // Temporaries per stage: with one token part, two (the products of K bytes 0-63 and 64-127 of the stage,
  // the second running while the thread adds the first); with two parts, one (registers).
  static constexpr int kTemps = kHalves == 1 ? 2 : 1;
  static constexpr size_t kSmem = 1024 + static_cast<size_t>(kStages) * (kStageBytes + 16);
  static_assert(kStages >= 3);
};

// One consumer warpgroup's partial sums of one tile, as its 128 threads hold them.
template <int kN, int kHalves>
constexpr int kSlotFloats = 128 * kHalves * kN / 2;
// Scratch per CTA: two slots (its first and last tile may be split) per consumer warpgroup, at the largest
// shape.
constexpr size_t kScratchFloatsPerCta = size_t{2} * kConsumers * kSlotFloats<128, 2>;

__device__ __forceinline__ void consumer_sync(int consumer) {
  asm volatile("bar.sync %0, 128;" ::"r"(1 + consumer) : "memory");
}

template <int kN, int kHalves, typename Out>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_wgmma_matmul_kernel(Out* __restrict__ out, const float* __restrict__ x_scales,
                            const float* __restrict__ w_scales, float alpha, int num_tokens, int k, int n,
                            int* __restrict__ counters, float* __restrict__ partials,
                            const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map) {
  using C = Config<kN, kHalves>;
  extern __shared__ unsigned char smem_raw[];
  __shared__ int last_arrival[kConsumers];
  __shared__ float token_scale[C::kTokens];  // alpha x_scales[t], 0 past the tokens
  const uint32_t stage0 = (smem_addr(smem_raw) + 1023) & ~1023u;
  const uint32_t full0 = stage0 + C::kStages * C::kStageBytes, empty0 = full0 + 8 * C::kStages;
  const int tid = static_cast<int>(threadIdx.x), warpgroup = tid / 128;
  const int chunks = (k + kChunk - 1) / kChunk;
  const StreamKPartition part{(static_cast<int64_t>(n) + kTileRows - 1) / kTileRows, chunks, gridDim.x};
  const int64_t c = blockIdx.x;
  const int64_t u_begin = part.begin(c), u_end = part.begin(c + 1);

  if (tid == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, 4 * kConsumers);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (warpgroup == kConsumers) {
    // --- producer ---
    wgmma::release_registers<kProducerRegisters>();
    if (tid != 128 * kConsumers) {
      grid_dependency_wait();  // every thread of every CTA waits (launch.cuh)
      return;
    }
    uint64_t weights_policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(weights_policy));
    uint64_t tokens_policy;  // the activations are read by every CTA
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(tokens_policy));
    // No divisions in the loops: stage, phase, tile and chunk advance.
    int s = 0, chunk = static_cast<int>(u_begin % chunks);
    uint32_t phase = 0;
    int tile = static_cast<int>(u_begin / chunks);
    const int64_t early = std::min<int64_t>(u_end - u_begin, C::kStages);
    // The first stages' weights before the wait, their activations after it.
    for (int64_t i = 0; i < early; ++i) {
      mbar_arrive_expect_tx(full0 + 8 * s, C::kStageBytes);
      tensor_copy_2d(stage0 + s * C::kStageBytes, &w_map, chunk * kChunk, tile * kTileRows, full0 + 8 * s,
                     weights_policy);
      if (++chunk == chunks) chunk = 0, ++tile;
      ++s;
    }
    grid_dependency_wait();
    s = 0, chunk = static_cast<int>(u_begin % chunks);
    for (int64_t i = 0; i < early; ++i) {
      tensor_copy_2d(stage0 + s * C::kStageBytes + kWeightBytes, &x_map, chunk * kChunk, 0, full0 + 8 * s,
                     tokens_policy);
      if (++chunk == chunks) chunk = 0;
      ++s;
    }
    if (s == C::kStages) s = 0, phase = 1;
    for (int64_t u = u_begin + early; u < u_end; ++u) {
      mbar_wait(empty0 + 8 * s, phase ^ 1);  // the consumers' previous round
      const uint32_t dst = stage0 + s * C::kStageBytes, full = full0 + 8 * s;
      mbar_arrive_expect_tx(full, C::kStageBytes);
      tensor_copy_2d(dst, &w_map, chunk * kChunk, tile * kTileRows, full, weights_policy);
      tensor_copy_2d(dst + kWeightBytes, &x_map, chunk * kChunk, 0, full, tokens_policy);
      if (++chunk == chunks) chunk = 0, ++tile;
      if (++s == C::kStages) s = 0, phase ^= 1;
    }
    return;
  }

  // --- consumers ---
  wgmma::claim_registers<kConsumerRegisters>();
  const int consumer = warpgroup, ctid = tid - 128 * warpgroup;
  const int warp = ctid / 32, lane = ctid % 32;
  grid_dependency_wait();
  allow_dependent_launch();
  for (int i = tid; i < C::kTokens; i += 128 * kConsumers) token_scale[i] = i < num_tokens ? alpha * x_scales[i] : 0.0f;
  asm volatile("bar.sync 3, %0;" ::"n"(128 * kConsumers) : "memory");  // the consumers only

  int s = 0;
  uint32_t phase = 0;
  for (int64_t u = u_begin, tile = u_begin / chunks; u < u_end; ++tile) {
    const int64_t seg_begin = u, seg_end = std::min<int64_t>(u_end, (tile + 1) * chunks);
    // This thread's rows' scales, loaded while the tile's products run (rows past n: never stored).
    const int64_t row0 = tile * kTileRows + consumer * 64 + 16 * warp + lane / 4;
    const float row_scale[2] = {row0 < n ? w_scales[row0] : 0.0f, row0 + 8 < n ? w_scales[row0 + 8] : 0.0f};
    float sum[kHalves][C::kAcc];
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
#pragma unroll
      for (int e = 0; e < C::kAcc; ++e) sum[h][e] = 0.0f;
    }
    for (; u < seg_end; ++u) {
      mbar_wait(full0 + 8 * s, phase);
      const uint32_t rows = stage0 + s * C::kStageBytes + consumer * 64 * 128;
      const uint32_t tokens = stage0 + s * C::kStageBytes + kWeightBytes;
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
        constexpr int kSteps = kChunk / 32 / C::kTemps;  // k32 products per temporary
        float t[C::kTemps][C::kAcc];
        wgmma::fence();
#pragma unroll
        for (int i = 0; i < C::kTemps; ++i) {
#pragma unroll
          for (int kk = i * kSteps; kk < (i + 1) * kSteps; ++kk) {
            wgmma::m64k32_e4m3<kN>(t[i], wgmma::desc_sw128(rows + 32 * kk, 16, 1024),
                                   wgmma::desc_sw128(tokens + h * kN * 128 + 32 * kk, 16, 1024), kk > i * kSteps);
          }
          wgmma::commit_group();
        }
        // Temporary i is complete once at most kTemps - 1 - i groups are pending.
        wgmma::wait_group<C::kTemps - 1>();
        wgmma::hold(t[0]);
#pragma unroll
        for (int e = 0; e < C::kAcc; ++e) sum[h][e] += t[0][e];
        if constexpr (C::kTemps == 2) {
          wgmma::wait_group<0>();
          wgmma::hold(t[1]);
#pragma unroll
          for (int e = 0; e < C::kAcc; ++e) sum[h][e] += t[1][e];
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(empty0 + 8 * s);  // this warp's products of the stage have completed
      if (++s == C::kStages) s = 0, phase ^= 1;
    }

    // Sum e of instruction h: weight row 16 warp + lane / 4 (+ 8 for e % 4 >= 2) of this warpgroup's 64, token
    // h kN + 8 (e / 4) + 2 (lane % 4) + e % 2.
    const auto store = [&](const float (&v)[kHalves][C::kAcc]) {
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
#pragma unroll
        for (int e = 0; e < C::kAcc; ++e) {
          const int64_t row = row0 + 8 * ((e % 4) / 2);
          const int token = h * kN + 8 * (e / 4) + 2 * (lane % 4) + e % 2;
          if (row < n && token < num_tokens) {
            out[static_cast<int64_t>(token) * n + row] = to_out<Out>(token_scale[token] * row_scale[(e % 4) / 2] * v[h][e]);
          }
        }
      }
    };
    if (seg_begin == tile * chunks && seg_end == (tile + 1) * chunks) {
      store(sum);
      continue;
    }
    // A split tile: this warpgroup's partial sums to its slot; the last CTA to arrive adds the tile's slots.
    const auto slot_of = [&](int64_t cta) {
      return partials + ((2 * cta + part.slot(cta, tile)) * kConsumers + consumer) * kSlotFloats<kN, kHalves> + ctid;
    };
    float* mine = slot_of(c);
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
#pragma unroll
      for (int e = 0; e < C::kAcc; ++e) mine[(h * C::kAcc + e) * 128] = sum[h][e];
    }
    const int64_t first = part.first_cta(tile), last = part.last_cta(tile);
    __threadfence();
    consumer_sync(consumer);
    if (ctid == 0) {
      int* counter = &counters[kConsumers * first + consumer];
      const int arrived = atomicAdd(counter, 1);
      last_arrival[consumer] = arrived == last - first;
      if (arrived == last - first) *counter = 0;  // ready for the next kernel on this stream
    }
    consumer_sync(consumer);
    if (last_arrival[consumer]) {
      __threadfence();
#pragma unroll
      for (int h = 0; h < kHalves; ++h) {
#pragma unroll
        for (int e = 0; e < C::kAcc; ++e) sum[h][e] = 0.0f;
      }
      for (int64_t cta = first; cta <= last; ++cta) {
        const float* slot = slot_of(cta);
#pragma unroll
        for (int h = 0; h < kHalves; ++h) {
#pragma unroll
          for (int e = 0; e < C::kAcc; ++e) sum[h][e] += __ldcg(&slot[(h * C::kAcc + e) * 128]);
        }
      }
      store(sum);
    }
    consumer_sync(consumer);  // last_arrival is free for the next tile
  }
}

template <int kN, int kHalves, typename Out>
void launch(Out* out, const Fp8SmallMatmul& p, const CUtensorMap& w_map, const CUtensorMap& x_map, int num_sms,
            cudaStream_t stream) {
  using C = Config<kN, kHalves>;
  auto* kernel = fp8_wgmma_matmul_kernel<kN, kHalves, Out>;
  static const bool configured = [&] {
    TIDE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(C::kSmem)));
    return true;
  }();
  (void)configured;
  const auto grid = static_cast<unsigned>(
      stream_k_grid((p.n + kTileRows - 1) / kTileRows, (p.k + kChunk - 1) / kChunk, num_sms, 1));
  launch_kernel(kernel, grid, kThreads, C::kSmem, stream, out, p.x_scales, p.w_scales, p.alpha,
                static_cast<int>(p.num_tokens), static_cast<int>(p.k), static_cast<int>(p.n),
                static_cast<int*>(p.split_scratch),
                reinterpret_cast<float*>(static_cast<char*>(p.split_scratch) + kFp8SplitCountersBytes), w_map, x_map);
}

// Tokens per tile: the smallest of the widths below that holds T (one instruction up to 128 tokens, two
// above), so that at most 32 padded tokens go through the tensor cores (a verify step of 32 sequences x 5
// tokens: 160, not 256).
template <typename Out>
bool dispatch(Out* out, const Fp8SmallMatmul& p, int num_sms, cudaStream_t stream) {
  const int tokens = fp8_wgmma_tile_tokens(p.num_tokens);
  CUtensorMap w_map{}, x_map{};
  if (!encode_rows_sw128(&w_map, p.w8, p.n, p.k, kTileRows) ||
      !encode_rows_sw128(&x_map, p.x8, p.num_tokens, p.k, tokens)) {
    return false;
  }
  switch (tokens) {
    case 32: launch<32, 1>(out, p, w_map, x_map, num_sms, stream); break;
    case 64: launch<64, 1>(out, p, w_map, x_map, num_sms, stream); break;
    case 96: launch<96, 1>(out, p, w_map, x_map, num_sms, stream); break;
    case 128: launch<128, 1>(out, p, w_map, x_map, num_sms, stream); break;
    case 160: launch<80, 2>(out, p, w_map, x_map, num_sms, stream); break;
    case 192: launch<96, 2>(out, p, w_map, x_map, num_sms, stream); break;
    default: launch<128, 2>(out, p, w_map, x_map, num_sms, stream); break;
  }
  return true;
}

}  // namespace

size_t fp8_wgmma_scratch_bytes(int num_sms) {
  return kFp8SplitCountersBytes + static_cast<size_t>(num_sms) * kScratchFloatsPerCta * sizeof(float);
}

bool fp8_wgmma_matmul_supports(int64_t num_tokens, int64_t k, int64_t n) {
  return num_tokens >= 1 && num_tokens <= kFp8WgmmaMatmulMaxTokens && k > 0 && k % 16 == 0 && n > 0 &&
         k <= (int64_t{1} << 30) && n <= (int64_t{1} << 30);
}

bool launch_fp8_wgmma_matmul(const Fp8SmallMatmul& p, int num_sms, cudaStream_t stream) {
  TIDE_CHECK(int64_t{num_sms} * kConsumers * sizeof(int) <= kSwigluSplitSyncOffset);
  if (reinterpret_cast<uintptr_t>(p.x8) % 16 != 0 || reinterpret_cast<uintptr_t>(p.w8) % 16 != 0) return false;
  return p.out_f32 ? dispatch(static_cast<float*>(p.out), p, num_sms, stream)
                   : dispatch(static_cast<bf16*>(p.out), p, num_sms, stream);
}

}  // namespace tide::cuda
