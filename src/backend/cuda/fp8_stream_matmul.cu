// FP8 matmul for few tokens that streams the weights through shared memory: the same product as
// fp8_small_matmul.cu (out[T, N] = alpha * x_scales[t] * w_scales[n] * sum_k x8[t][k] w8[n][k], T <= 16),
// built to share the GPU with the kernels of the other stream.
//
// Why: the register-fed kernel keeps its loads in flight in registers (124 per thread, two CTAs fill an SM's
// register file), so while it runs the other stream's kernels find no room, and a kernel launched early
// (launch.cuh) can do nothing useful before its input is ready. Here one producer warp per CTA copies 16-row
// weight tiles into a ring of shared-memory stages with bulk asynchronous copies (one tensor-map copy per
// stage, or one cp.async.bulk per row: Feed below; completion counted on an mbarrier); four consumer warps
// feed them to mma.sync. The bytes in flight sit in shared memory, not registers (a CTA of 160 threads holds
// 19-26K registers), and since the weights are never written by a kernel the producer starts copying before
// the grid dependency resolves: a kernel scheduled early fills its stages while the kernel before it
// finishes. Alone it reads a matrix slower than the register-fed kernel (neither tensor-map copies nor
// activations loaded a stage ahead closed the gap); beside the other stream's kernels it can be faster
// (fp8_small_matmul.cu's dispatch says where; the measurements are in docs/perf-log/).
//
// Work split (stream-K): the matrix is cut into units of 16 rows x 1024 bytes of K, numbered row tile by row
// tile; CTA c of G takes units [c U / G, (c + 1) U / G), so every CTA reads the same bytes whatever N and K
// are. G is the CTAs that fit at once, or fewer where each can take whole tiles, also at fewer CTAs per SM
// (stream_k_grid). A row tile that one CTA covers whole is written directly. A tile split between CTAs has
// each of them store its partial sums in a scratch slot; the last to arrive (counted atomically) adds the
// slots in CTA order, so the result does not depend on which CTA finishes first (backend/stream_k.h).
#include <cuda_bf16.h>
#include <cudaTypedefs.h>

#include <algorithm>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/fp8_mma.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/tensor_map.h"
#include "backend/stream_k.h"

namespace tide::cuda {
namespace {

constexpr int kConsumerWarps = 4;
constexpr int kThreads = 32 * (kConsumerWarps + 1);
constexpr int kTileRows = 16;
constexpr int kStepBytes = 64;  // K per pair of m16n8k32 products
constexpr int kChunk = 1024;    // K per stage
constexpr int kStepsPerWarp = kChunk / kStepBytes / kConsumerWarps;
constexpr int kMaxCtasPerSm = 2;
// Scratch per CTA: two slots (its first and its last row tile may be split) of 16 rows x 16 tokens.
constexpr int kSlotFloats = kTileRows * 16;

// How a stage (16 weight rows x kChunk bytes of K) is copied and laid out in shared memory: byte b of 64-byte
// step s of row r sits at r * row_stride + s * step_stride + b. A quarter warp reads 64 bytes of two adjacent
// rows (fp8_mma.cuh's lanes), conflict-free when those fall in different halves of the 32 banks.
//  - kRows: one bulk copy per row (16 per stage), rows padded to 1088 bytes.
//  - kTensorStepMajor: one tensor-map copy per stage into [step][row][64 bytes] (conflict-free, the map's
//    strides out of order: rows K bytes apart, steps 64).
//  - kTensorRowMajor: the same copy into [row][step][64 bytes] (the map's strides in order; two rows of a
//    quarter warp share their banks), for a driver that refuses the first map.
enum class Feed { kRows, kTensorStepMajor, kTensorRowMajor };

struct StageLayout {
  int row_stride, step_stride, bytes;
};
constexpr StageLayout layout_of(Feed f) {
  return f == Feed::kRows              ? StageLayout{kChunk + 64, kStepBytes, kTileRows * (kChunk + 64)}
         : f == Feed::kTensorStepMajor ? StageLayout{kStepBytes, kTileRows * kStepBytes, kTileRows * kChunk}
                                       : StageLayout{kChunk, kStepBytes, kTileRows * kChunk};
}
// Dynamic shared memory: the stages (from a 128-byte boundary), then each stage's full and empty mbarriers.
constexpr size_t smem_bytes(Feed f, int stages) {
  return 128 + static_cast<size_t>(stages) * (layout_of(f).bytes + 16);
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Synchronizes the consumer warps only (the producer warp may have finished).
__device__ __forceinline__ void consumer_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(32 * kConsumerWarps) : "memory");
}

// `map` (the weights as a 3D tensor: 64 bytes, then rows and 64-byte steps in the feed's order) is read by
// the tensor feeds only.
template <int kNTiles, typename Out, Feed kFeed>
__global__ void __launch_bounds__(kThreads, kMaxCtasPerSm)
    fp8_stream_matmul_kernel(Out* __restrict__ out, const uint8_t* __restrict__ x8, const float* __restrict__ x_scales,
                             const uint8_t* __restrict__ w8, const float* __restrict__ w_scales, float alpha,
                             int num_tokens, int k, int n, int stages, int* __restrict__ counters,
                             float* __restrict__ partials, const __grid_constant__ CUtensorMap map) {
  constexpr int kCols = 8 * kNTiles;
  constexpr StageLayout kLayout = layout_of(kFeed);
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ float reduce[kConsumerWarps][kTileRows][kCols];
  __shared__ int last_arrival;
  __shared__ float token_scale[kCols];

  const uint32_t stage0 = (smem_addr(smem) + 127) & ~127u;
  const uint32_t full0 = stage0 + stages * kLayout.bytes, empty0 = full0 + 8 * stages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int chunks = (k + kChunk - 1) / kChunk;
  const StreamKPartition part{(static_cast<int64_t>(n) + kTileRows - 1) / kTileRows, chunks, gridDim.x};
  const int64_t c = blockIdx.x;
  const int64_t u_begin = part.begin(c), u_end = part.begin(c + 1);

  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();

  if (warp == kConsumerWarps) {
    // The producer: lane r copies row r of each unit's tile, or lane 0 the whole tile with the tensor map. It
    // reads only weights, so it does not wait for the kernel before (the consumers do, before reading x8).
    constexpr bool kTensor = kFeed != Feed::kRows;
    if (lane >= (kTensor ? 1 : kTileRows)) return;
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    // No divisions in the loops (64-bit ones cost hundreds of cycles): stage, phase, tile and chunk advance.
    int s = 0, chunk = static_cast<int>(u_begin % chunks);
    uint32_t phase = 0;
    int64_t tile = u_begin / chunks;
    for (int64_t u = u_begin; u < u_end; ++u) {
      if (u - u_begin >= stages) mbar_wait(empty0 + 8 * s, phase ^ 1);  // the consumers' previous round
      const uint32_t dst = stage0 + s * kLayout.bytes, full = full0 + 8 * s;
      if constexpr (kTensor) {
        mbar_arrive_expect_tx(full, kLayout.bytes);
        const int row = static_cast<int>(tile) * kTileRows, step = chunk * (kChunk / kStepBytes);
        if constexpr (kFeed == Feed::kTensorStepMajor) {
          tensor_copy(dst, &map, row, step, full, policy);
        } else {
          tensor_copy(dst, &map, step, row, full, policy);
        }
      } else {
        const int k0 = chunk * kChunk, len = min(kChunk, k - k0);
        if (lane == 0) mbar_arrive_expect_tx(full, kTileRows * len);
        __syncwarp(0xffff);
        // Rows past n copy the last row (their sums are never written).
        const int64_t row = min64(tile * kTileRows + lane, n - 1);
        bulk_copy(dst + lane * kLayout.row_stride, w8 + row * k + k0, len, full, policy);
      }
      if (++chunk == chunks) chunk = 0, ++tile;
      if (++s == stages) s = 0, phase ^= 1;
    }
    return;
  }

  grid_dependency_wait();
  allow_dependent_launch();
  if (threadIdx.x < kCols) token_scale[threadIdx.x] = threadIdx.x < num_tokens ? x_scales[threadIdx.x] : 1.0f;

  // Lane (g, q) of a consumer warp: as in fp8_small_matmul.cu, the 16 bytes at 16 q of rows g and g + 8 and
  // of tokens g (and g + 8 with two n-tiles) per 64-byte step; warp w takes steps w, w + 4, ... of a stage.
  const int g = lane / 4, q = lane % 4;
  const TokenRows<kNTiles> tokens(x8, num_tokens, k, g, q);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const int64_t first_tile = u_begin / chunks;

  int s = 0;
  uint32_t phase = 0;
  int64_t tile = first_tile;
  for (int64_t u = u_begin; u < u_end; ++tile) {
    const int64_t seg_begin = u, seg_end = min64(u_end, (tile + 1) * chunks);
    float acc[kNTiles][4] = {};
    for (int chunk = static_cast<int>(u - tile * chunks); u < seg_end; ++u, ++chunk) {
      const int k0 = chunk * kChunk, len = min(kChunk, k - k0);
      const uint32_t a = stage0 + s * kLayout.bytes + g * kLayout.row_stride + 16 * q;
      uint4 w[kStepsPerWarp][2], x[kStepsPerWarp][kNTiles];
#pragma unroll
      for (int t = 0; t < kStepsPerWarp; ++t) {
        const int offset = (warp + kConsumerWarps * t) * kStepBytes;
        const bool inside = offset + 16 * q < len;  // K is a multiple of 16
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          x[t][j] = inside && tokens.has[j] ? __ldg(reinterpret_cast<const uint4*>(tokens.row[j] + k0 + offset)) : zero;
        }
      }
      mbar_wait(full0 + 8 * s, phase);
#pragma unroll
      for (int t = 0; t < kStepsPerWarp; ++t) {
        const int step = warp + kConsumerWarps * t;
        const bool inside = step * kStepBytes + 16 * q < len;
        const uint32_t at = a + step * kLayout.step_stride;
        w[t][0] = inside ? lds128(at) : zero;
        w[t][1] = inside ? lds128(at + 8 * kLayout.row_stride) : zero;
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(empty0 + 8 * s);  // this warp's reads of the stage are done
#pragma unroll
      for (int t = 0; t < kStepsPerWarp; ++t) {
#pragma unroll
        for (int j = 0; j < kNTiles; ++j) {
          float d0[4], d1[4];
          const uint4& lo = w[t][0];
          const uint4& hi = w[t][1];
          mma_e4m3(d0, lo.x, hi.x, lo.y, hi.y, x[t][j].x, x[t][j].y);
          mma_e4m3(d1, lo.z, hi.z, lo.w, hi.w, x[t][j].z, x[t][j].w);
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[j][e] += d0[e] + d1[e];
        }
      }
      if (++s == stages) s = 0, phase ^= 1;
    }

    // Accumulator e of lane (g, q): row g (+8 for e >= 2), token 2q + (e & 1) of its n-tile.
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) reduce[warp][g + 8 * (e / 2)][8 * j + 2 * q + (e & 1)] = acc[j][e];
    }
    consumer_sync();
    const bool whole = seg_begin == tile * chunks && seg_end == (tile + 1) * chunks;
    const int slot = part.slot(c, tile);
    for (int e = threadIdx.x; e < kTileRows * kCols; e += 32 * kConsumerWarps) {
      const int token = e / kTileRows, r = e % kTileRows;
      const int64_t row = tile * kTileRows + r;
      if (token >= num_tokens) continue;
      float sum = 0.0f;
#pragma unroll
      for (int v = 0; v < kConsumerWarps; ++v) sum += reduce[v][r][token];
      if (!whole) {
        partials[(2 * c + slot) * kSlotFloats + r * 16 + token] = sum;
      } else if (row < n) {
        out[static_cast<int64_t>(token) * n + row] = to_out<Out>(alpha * token_scale[token] * w_scales[row] * sum);
      }
    }
    if (!whole) {
      const int64_t first = part.first_cta(tile), last = part.last_cta(tile);
      __threadfence();
      consumer_sync();
      if (threadIdx.x == 0) {
        const int arrived = atomicAdd(&counters[first], 1);
        last_arrival = arrived == last - first;
        if (last_arrival) counters[first] = 0;  // ready for the next kernel on this stream
      }
      consumer_sync();
      if (last_arrival) {
        __threadfence();
        for (int e = threadIdx.x; e < kTileRows * kCols; e += 32 * kConsumerWarps) {
          const int token = e / kTileRows, r = e % kTileRows;
          const int64_t row = tile * kTileRows + r;
          if (token >= num_tokens || row >= n) continue;
          float sum = 0.0f;
          for (int64_t cc = first; cc <= last; ++cc) {
            sum += __ldcg(&partials[(2 * cc + part.slot(cc, tile)) * kSlotFloats + r * 16 + token]);
          }
          out[static_cast<int64_t>(token) * n + row] = to_out<Out>(alpha * token_scale[token] * w_scales[row] * sum);
        }
      }
    }
    consumer_sync();  // `reduce` and `last_arrival` are free for the next tile
  }
}

// The weights [n, k] as the 3D tensor a tensor feed copies boxes of 64 bytes x 16 rows x 16 steps from.
bool encode_weights(CUtensorMap* map, Feed feed, const uint8_t* w8, int64_t n, int64_t k) {
  const auto encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const bool step_major = feed == Feed::kTensorStepMajor;
  const auto rows = static_cast<cuuint64_t>(n), steps = static_cast<cuuint64_t>(k / kStepBytes);
  const cuuint64_t dims[3] = {kStepBytes, step_major ? rows : steps, step_major ? steps : rows};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(step_major ? k : kStepBytes),
                                 static_cast<cuuint64_t>(step_major ? kStepBytes : k)};
  const cuuint32_t box[3] = {kStepBytes, kTileRows, kChunk / kStepBytes};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, const_cast<uint8_t*>(w8), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The tensor feed this driver takes (the step-major map if it accepts strides out of order), asked once with
// a made-up aligned address (encoding only describes memory, it does not touch it); kRows if neither.
Feed tensor_feed() {
  static const Feed feed = [] {
    CUtensorMap map{};
    const auto* probe = reinterpret_cast<const uint8_t*>(uintptr_t{1} << 24);
    for (const Feed f : {Feed::kTensorStepMajor, Feed::kTensorRowMajor}) {
      if (encode_weights(&map, f, probe, 4 * kTileRows, 4 * kChunk)) return f;
    }
    return Feed::kRows;
  }();
  return feed;
}

template <int kNTiles, typename Out, Feed kFeed>
void launch(Out* out, const Fp8SmallMatmul& p, const CUtensorMap& map, int stages, int num_sms, int ctas_per_sm,
            cudaStream_t stream) {
  auto* kernel = fp8_stream_matmul_kernel<kNTiles, Out, kFeed>;
  static const bool configured = [&] {
    TIDE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem_bytes(kFeed, kFp8StreamMaxStages))));
    // Up to 8 tokens, the SM's largest shared-memory split, as the attention kernels ask: three CTAs of this
    // kernel (gate_up's two and qkv's one in the decode step) and an attention CTA beside them (faster at long
    // contexts than the driver's pick). Not at 9-16 tokens, where it made the step slower (R7B 16 x 1K on an
    // H100: 4.480 against 4.341 ms).
    if (kNTiles == 1) {
      TIDE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           cudaSharedmemCarveoutMaxShared));
    }
    return true;
  }();
  (void)configured;
  const auto grid = static_cast<unsigned>(
      stream_k_grid((p.n + kTileRows - 1) / kTileRows, (p.k + kChunk - 1) / kChunk, num_sms, ctas_per_sm));
  if (stages == 0) {
    // A CTA's stream of up to 32 units (R7B's four projections: 4-28) on 2 stages, longer ones (Command-A's:
    // 36-216) on 4 (the step times behind it: docs/perf-log/2026-12.md). Short streams spend much of their
    // time in the stages filled before the grid dependency wait, and fewer bytes in flight leave the attention
    // chain's loads shorter queues; long ones need more in flight.
    stages = (p.n + kTileRows - 1) / kTileRows * ((p.k + kChunk - 1) / kChunk) <= 32 * int64_t{grid} ? 2 : 4;
  }
  const size_t smem = smem_bytes(kFeed, stages);
  launch_kernel(kernel, grid, kThreads, smem, stream, out, p.x8, p.x_scales, p.w8, p.w_scales,
                p.alpha, static_cast<int>(p.num_tokens), static_cast<int>(p.k), static_cast<int>(p.n), stages,
                static_cast<int*>(p.split_scratch),
                reinterpret_cast<float*>(static_cast<char*>(p.split_scratch) + kFp8SplitCountersBytes), map);
}

template <typename Out, Feed kFeed>
void dispatch(Out* out, const Fp8SmallMatmul& p, const CUtensorMap& map, int stages, int num_sms, int ctas_per_sm,
              cudaStream_t stream) {
  if (p.num_tokens <= 8) {
    launch<1, Out, kFeed>(out, p, map, stages, num_sms, ctas_per_sm, stream);
  } else {
    launch<2, Out, kFeed>(out, p, map, stages, num_sms, ctas_per_sm, stream);
  }
}

template <typename Out>
void dispatch(Out* out, const Fp8SmallMatmul& p, bool tensor_map, int stages, int num_sms, int ctas_per_sm,
              cudaStream_t stream) {
  CUtensorMap map{};
  // A tensor feed needs whole 64-byte steps and a 16-byte aligned matrix.
  const Feed feed = tensor_map && p.k % kStepBytes == 0 && reinterpret_cast<uintptr_t>(p.w8) % 16 == 0 &&
                            encode_weights(&map, tensor_feed(), p.w8, p.n, p.k)
                        ? tensor_feed()
                        : Feed::kRows;
  switch (feed) {
    case Feed::kTensorStepMajor:
      return dispatch<Out, Feed::kTensorStepMajor>(out, p, map, stages, num_sms, ctas_per_sm, stream);
    case Feed::kTensorRowMajor:
      return dispatch<Out, Feed::kTensorRowMajor>(out, p, map, stages, num_sms, ctas_per_sm, stream);
    case Feed::kRows:
      return dispatch<Out, Feed::kRows>(out, p, map, stages, num_sms, ctas_per_sm, stream);
  }
}

}  // namespace

const char* fp8_stream_tensor_feed() {
  switch (tensor_feed()) {
    case Feed::kTensorStepMajor: return "step-major";
    case Feed::kTensorRowMajor: return "row-major";
    case Feed::kRows: break;
  }
  return "none";
}

size_t fp8_split_scratch_bytes(int num_sms) {
  return kFp8SplitCountersBytes + static_cast<size_t>(num_sms) * kMaxCtasPerSm * 2 * kSlotFloats * sizeof(float);
}

void launch_fp8_stream_matmul(const Fp8SmallMatmul& p, const Fp8StreamShape& shape, int num_sms, cudaStream_t stream) {
  const int stages = shape.stages, ctas_per_sm = shape.ctas_per_sm;
  TIDE_CHECK((stages == 0 || (stages >= 2 && stages <= kFp8StreamMaxStages)) && ctas_per_sm >= 1 &&
             ctas_per_sm <= kMaxCtasPerSm);
  TIDE_CHECK(int64_t{num_sms} * kMaxCtasPerSm * sizeof(int) <= kSwigluSplitSyncOffset);
  if (p.out_f32) {
    dispatch(static_cast<float*>(p.out), p, shape.tensor_map, stages, num_sms, ctas_per_sm, stream);
  } else {
    dispatch(static_cast<bf16*>(p.out), p, shape.tensor_map, stages, num_sms, ctas_per_sm, stream);
  }
}

}  // namespace tide::cuda
