// Prefill / chunked-prefill attention on tensor cores (mma.sync m16n8k16, bf16 in, f32 accumulate),
// FlashAttention-2 style, over the paged window-aware KV cache. Template on head_dim; included by the
// instantiation files attention_d<D>.cu.
//
// A CTA of 4 warps serves kRows consecutive packed rows of one sequence and one KV head, a row being
// (new token, query head of the group): the K/V tiles of a group are read once for all its query heads.
// Each warp owns kMTiles x 16 rows (32 for head_dim <= 128, so that ldmatrix traffic does not limit the
// tensor cores). K/V tiles of kKeys keys are gathered through the block table with cp.async into
// XOR-swizzled shared memory, double-buffered. S = Q K^T, the online softmax and P stay in registers: the
// S accumulator fragments are repacked as bf16 A fragments of P V. Only key tiles inside some row's
// [window start, position] range are visited, and only tiles on a boundary are masked. Non-goals: head_dim
// not in {64, 128, 256} (the generic kernel in attention.cu serves those).
#pragma once

#include <cfloat>

#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_attention.cuh"
#include "backend/cuda/prefill_tiling.h"

namespace tide::cuda::mma {

// kFp8: an FP8 cache, staged raw (Fp8KvStage) and dequantized into one bf16 K/V tile pair after the stages.
template <int D, bool kFp8 = false>
struct PrefillConfig {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMTiles = D <= 128 ? 2 : 1;  // 16-row mma tiles per warp
  static constexpr int kRows = kWarps * 16 * kMTiles;
  static constexpr int kKeys = D <= 128 ? 64 : 32;  // keys per K/V tile (one barrier per tile)
  static constexpr int kSubKeys = 32;                // keys per S block in registers
  static constexpr int kStages = 2;
  static constexpr int kTileBytes = kKeys * D * 2;
  static constexpr int kStageBytes = kFp8 ? Fp8KvStage<D, kKeys>::kBytes : 2 * kTileBytes;
  static constexpr size_t kSmemBytes =
      static_cast<size_t>(kRows * D * 2 + kStages * kStageBytes + (kFp8 ? 2 * kTileBytes : 0));
  static constexpr int kMinBlocks = 2;  // CTAs per SM (96 KB of shared memory each at D = 128)
};

struct PrefillParams {
  PagedAttentionParams p;
  int tiles_per_seq;      // row tiles per sequence, from the longest sequence of the batch
  int group;              // query heads per KV head
  float scale_log2;       // D^-0.5 * log2(e): softmax in base 2
};

// Row tile `rank` of listed sequence `listed` (both prefill kernels): rank 0 is a sequence's last row tile (it
// sees the most keys under a causal mask, so the short ones fill the tail); a row is (new token, query head of
// the group), kRows rows per tile. 32-bit arithmetic: a 64-bit division is a call, and calls spill registers.
// There is nothing to do when row0 >= num_rows.
struct PrefillRowTile {
  int seq, seq_begin, num_rows, row0;
  int tok_first, pos_first, pos_max;  // a sequence's new tokens have consecutive positions
};

// Row tile `rank` of sequence `seq`, whose new tokens are [seq_begin, seq_end).
template <int kRows>
__device__ __forceinline__ PrefillRowTile prefill_row_tile_of(const PrefillParams& pp, int seq, int seq_begin,
                                                              int seq_end, int rank) {
  const PagedAttentionParams& p = pp.p;
  PrefillRowTile t;
  t.seq = seq;
  t.row0 = prefill_rank_row0(rank, pp.tiles_per_seq, kRows);
  t.seq_begin = seq_begin;
  t.num_rows = (seq_end - seq_begin) * pp.group;
  t.tok_first = t.row0 / pp.group;
  const int tok_last = (min(t.num_rows, t.row0 + kRows) - 1) / pp.group;
  t.pos_first = t.row0 < t.num_rows ? p.positions[t.seq_begin + t.tok_first] : 0;
  t.pos_max = t.pos_first + tok_last - t.tok_first;
  return t;
}

template <int kRows>
__device__ __forceinline__ PrefillRowTile prefill_row_tile_at(const PrefillParams& pp, int listed, int rank) {
  const PagedAttentionParams& p = pp.p;
  const int seq = p.seq_list != nullptr ? p.seq_list[listed] : listed;
  return prefill_row_tile_of<kRows>(pp, seq, p.seq_starts[seq], p.seq_starts[seq + 1], rank);
}

// The row tile of a CTA of the mma.sync kernel: blockIdx.x is (listed sequence, rank).
template <int kRows>
__device__ __forceinline__ PrefillRowTile prefill_row_tile(const PrefillParams& pp) {
  return prefill_row_tile_at<kRows>(pp, static_cast<int>(blockIdx.x) / pp.tiles_per_seq,
                                    static_cast<int>(blockIdx.x) % pp.tiles_per_seq);
}

// kFp8: K/V from an FP8 cache (KvTileCopy; all threads widen a tile, then a barrier; the keys' scales
// go on the scores and probabilities).
template <int D, bool kFp8 = false>
__global__ void __launch_bounds__(PrefillConfig<D, kFp8>::kThreads, PrefillConfig<D, kFp8>::kMinBlocks)
    prefill_attention_kernel(const __grid_constant__ PrefillParams pp) {
  begin_dependent_kernel();
  using C = PrefillConfig<D, kFp8>;
  const PagedAttentionParams& p = pp.p;
  const PrefillRowTile rt = prefill_row_tile<C::kRows>(pp);
  if (rt.row0 >= rt.num_rows) return;
  const int seq = rt.seq, num_rows = rt.num_rows, row0 = rt.row0;
  const int tok_first = rt.tok_first, pos_first = rt.pos_first, pos_max = rt.pos_max;
  const int64_t kv_head = blockIdx.y;
  const int64_t seq_begin = rt.seq_begin;
  const int group = pp.group;
  const int window = static_cast<int>(p.window);
  // Key tiles at multiples of kKeys wherever the row tile starts (prefill_tiling.h).
  const PrefillTiles tiles = prefill_tiles(pos_first, pos_max, window, C::kKeys);
  const int first_read = tiles.first_read, key_lo = tiles.key_lo, num_tiles = tiles.num_tiles;
  const int32_t* table = p.block_tables + seq * p.max_blocks;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t q_tile = smem_addr(smem);
  const uint32_t kv_base = q_tile + C::kRows * D * 2;  // stage s at + s kStageBytes (bf16: K, then V)
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t row_size = (p.num_heads + 2 * p.num_heads_kv) * D;

  // Q rows (zero past the sequence's rows), in the same cp.async group as the first K/V tile.
  for (int i = tid; i < C::kRows * (D / 8); i += C::kThreads) {
    const int r = i / (D / 8), c = i % (D / 8);
    const int row = row0 + r;
    const bool valid = row < num_rows;
    const bf16* src = valid ? p.qkv + (seq_begin + row / group) * row_size + (kv_head * group + row % group) * D + c * 8
                            : p.qkv;
    cp_async_16(q_tile + swizzle<D>(r, c), src, valid);
  }
  // Starts the copies of tile `tile` into stage `stage` (KvTileCopy).
  const auto load_tile = [&](int stage, int tile) {
    using Copy = KvTileCopy<D, C::kKeys, C::kThreads, kFp8>;
    const int k0 = key_lo + tile * C::kKeys;
    Copy::load(kv_base + stage * C::kStageBytes, p, table, kv_head, k0, first_read, pos_max + 1, tid);
  };
#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < num_tiles) load_tile(s, s);
    cp_async_commit();
  }

  // This thread's rows are warp_row + 16 m + lane / 4 + 8 h (h = 0, 1) of the tile.
  const int warp_row = warp * 16 * C::kMTiles;
  const int pos_min = pos_first;

  float o[C::kMTiles][D / 8][4] = {};
  float row_max[C::kMTiles][2], row_sum[C::kMTiles][2];  // row_sum: this thread's part of the row
#pragma unroll
  for (int m = 0; m < C::kMTiles; ++m) {
    row_max[m][0] = row_max[m][1] = -INFINITY;
    row_sum[m][0] = row_sum[m][1] = 0.0f;
  }

  for (int it = 0; it < num_tiles; ++it) {
    cp_async_wait<C::kStages - 2>();
    __syncthreads();  // tile `it` landed for all threads; every warp is done with tile it - 1's stage
    {
      const int next = it + C::kStages - 1;
      const int stage = next % C::kStages;
      if (next < num_tiles) load_tile(stage, next);
      cp_async_commit();
    }
    const uint32_t stage_at = kv_base + (it % C::kStages) * C::kStageBytes;
    uint32_t k_tile = stage_at;
    if constexpr (kFp8) {
      k_tile = kv_base + C::kStages * C::kStageBytes;
      widen_kv_rows<D, C::kKeys, C::kThreads>(k_tile, k_tile + C::kTileBytes, stage_at, tid);
      __syncthreads();  // every warp reads every key of the bf16 tiles
    }
    const uint32_t v_tile = k_tile + C::kTileBytes;
    // S blocks of kSubKeys keys: scores, softmax and P of 32 rows x 32 keys stay in registers.
#pragma unroll 1
    for (int sub = 0; sub < C::kKeys / C::kSubKeys; ++sub) {
      const int k0 = key_lo + it * C::kKeys + sub * C::kSubKeys;

      // S = Q K^T: A fragments of both m-tiles are loaded once per 16 dims and reused over all keys.
      float s[C::kMTiles][C::kSubKeys / 8][4] = {};
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[C::kMTiles][4];
#pragma unroll
        for (int m = 0; m < C::kMTiles; ++m) {
          ldmatrix_x4(a[m], q_tile + swizzle<D>(warp_row + 16 * m + lane % 16, 2 * kk + lane / 16));
        }
#pragma unroll
        for (int nn = 0; nn < C::kSubKeys / 16; ++nn) {
          uint32_t b[4];
          ldmatrix_x4(b, k_tile + swizzle<D>(sub * C::kSubKeys + 16 * nn + (lane / 16) * 8 + lane % 8, 2 * kk + (lane / 8) % 2));
#pragma unroll
          for (int m = 0; m < C::kMTiles; ++m) {
            mma_bf16(s[m][2 * nn], a[m], b[0], b[1]);
            mma_bf16(s[m][2 * nn + 1], a[m], b[2], b[3]);
          }
        }
      }

      if constexpr (kFp8) scale_by_keys<D, C::kKeys>(s, stage_at, 0, sub * C::kSubKeys, lane);

      // Mask only tiles that some row does not see whole: past the first row's position, or before the last
      // row's window start.
      const bool boundary = prefill_needs_mask(k0, C::kSubKeys, pos_min, pos_max, window);
      if (boundary) {
        const int key_base = k0 + 2 * (lane % 4);
#pragma unroll
        for (int m = 0; m < C::kMTiles; ++m) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            // Padding rows past the sequence get position -1: every key masked.
            const int row = row0 + warp_row + 16 * m + lane / 4 + 8 * h;
            const int pos = row < num_rows ? pos_first + row / group - tok_first : -1;
            const int first_key = window_first_key(pos, window);
#pragma unroll
            for (int j = 0; j < C::kSubKeys / 8; ++j) {
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                const int key = key_base + 8 * j + e;
                if (key > pos || key < first_key) s[m][j][2 * h + e] = -INFINITY;
              }
            }
          }
        }
      }

      // Online softmax in base 2; the 4 lanes of a quad share a row.
      float corrections[C::kMTiles][2];
#pragma unroll
      for (int m = 0; m < C::kMTiles; ++m) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = row_max[m][h];
#pragma unroll
          for (int j = 0; j < C::kSubKeys / 8; ++j) mx = fmaxf(mx, fmaxf(s[m][j][2 * h], s[m][j][2 * h + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          // A row with no visible key yet keeps max -inf; subtract 0 then so exp gives 0, not NaN.
          const float base = mx == -INFINITY ? 0.0f : mx * pp.scale_log2;
          const float correction = ex2(row_max[m][h] * pp.scale_log2 - base);
          row_max[m][h] = mx;
          float sum = 0.0f;
#pragma unroll
          for (int j = 0; j < C::kSubKeys / 8; ++j) {
            s[m][j][2 * h] = ex2(fmaf(s[m][j][2 * h], pp.scale_log2, -base));
            s[m][j][2 * h + 1] = ex2(fmaf(s[m][j][2 * h + 1], pp.scale_log2, -base));
            sum += s[m][j][2 * h] + s[m][j][2 * h + 1];
          }
          row_sum[m][h] = row_sum[m][h] * correction + sum;
          corrections[m][h] = correction;
        }
      }
      // Once the running maxima settle, most blocks change none of the warp's rows: skip rescaling O then.
      bool rescale = false;
#pragma unroll
      for (int m = 0; m < C::kMTiles; ++m) rescale |= corrections[m][0] != 1.0f || corrections[m][1] != 1.0f;
      if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
        for (int m = 0; m < C::kMTiles; ++m) {
#pragma unroll
          for (int n = 0; n < D / 8; ++n) {
            o[m][n][0] *= corrections[m][0];
            o[m][n][1] *= corrections[m][0];
            o[m][n][2] *= corrections[m][1];
            o[m][n][3] *= corrections[m][1];
          }
        }
      }

      if constexpr (kFp8) scale_by_keys<D, C::kKeys>(s, stage_at, 1, sub * C::kSubKeys, lane);
      // O += P V, P repacked from the S accumulators (columns 2t, 2t+1 of key tiles 2kk and 2kk+1 are exactly
      // the A fragment of keys [16 kk, 16 kk + 16)).
#pragma unroll
      for (int kk = 0; kk < C::kSubKeys / 16; ++kk) {
        uint32_t a[C::kMTiles][4];
#pragma unroll
        for (int m = 0; m < C::kMTiles; ++m) {
          a[m][0] = pack_bf16(s[m][2 * kk][0], s[m][2 * kk][1]);
          a[m][1] = pack_bf16(s[m][2 * kk][2], s[m][2 * kk][3]);
          a[m][2] = pack_bf16(s[m][2 * kk + 1][0], s[m][2 * kk + 1][1]);
          a[m][3] = pack_bf16(s[m][2 * kk + 1][2], s[m][2 * kk + 1][3]);
        }
#pragma unroll
        for (int nd = 0; nd < D / 16; ++nd) {
          uint32_t b[4];
          ldmatrix_x4_trans(
              b, v_tile + swizzle<D>(sub * C::kSubKeys + 16 * kk + lane % 8 + ((lane / 8) % 2) * 8, 2 * nd + lane / 16));
#pragma unroll
          for (int m = 0; m < C::kMTiles; ++m) {
            mma_bf16(o[m][2 * nd], a[m], b[0], b[1]);
            mma_bf16(o[m][2 * nd + 1], a[m], b[2], b[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();

  // out = O / l; each quad writes 16 contiguous bytes per 8 columns of a row.
#pragma unroll
  for (int m = 0; m < C::kMTiles; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = row_sum[m][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const int row = row0 + warp_row + 16 * m + lane / 4 + 8 * h;
      if (row >= num_rows) continue;
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      bf16* out = p.out + (seq_begin + row / group) * p.num_heads * D + (kv_head * group + row % group) * D +
                  2 * (lane % 4);
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        *reinterpret_cast<uint32_t*>(out + 8 * n) = pack_bf16(o[m][n][2 * h] * inv, o[m][n][2 * h + 1] * inv);
      }
    }
  }
}

template <int D, bool kFp8>
void launch_prefill_kernel(const PrefillParams& pp, dim3 grid, cudaStream_t stream) {
  using C = PrefillConfig<D, kFp8>;
  static const bool configured = (configure_smem(prefill_attention_kernel<D, kFp8>, C::kSmemBytes), true);
  (void)configured;
  launch_kernel(prefill_attention_kernel<D, kFp8>, grid, C::kThreads, C::kSmemBytes, stream, pp);
}

template <int D>
void launch_prefill(const PagedAttentionParams& p, int64_t max_seq_tokens, cudaStream_t stream) {
  using C = PrefillConfig<D>;
  if (p.num_tokens == 0) return;
  const int group = static_cast<int>(p.num_heads / p.num_heads_kv);
  const int64_t tiles = (max_seq_tokens * group + C::kRows - 1) / C::kRows;
  const PrefillParams pp{p, static_cast<int>(tiles), group, p.scale * kLog2e};
  const dim3 grid(static_cast<unsigned>(p.num_seqs * tiles), static_cast<unsigned>(p.num_heads_kv));
  if (p.cache8 != nullptr) {
    launch_prefill_kernel<D, true>(pp, grid, stream);
  } else {
    launch_prefill_kernel<D, false>(pp, grid, stream);
  }
}

}  // namespace tide::cuda::mma
