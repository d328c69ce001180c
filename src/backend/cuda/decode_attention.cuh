// Decode attention on tensor cores (mma.sync m16n8k16), split over keys (flash-decoding style), over the
// paged window-aware KV cache. Template on head_dim; included by attention_d<D>.cu.
//
// A CTA serves one token and one KV head against one split of the token's keys [max(0, p - W + 1), p], in tiles
// of 64 keys. The keys are the mma's M and the group's query heads its N, in tiles of 8 (S^T = K Q^T,
// O^T = V^T P^T): a decode's group of 4 fills half of an 8-wide N (a 16-row M would be a quarter full), the
// output needs half the registers, and the queries sit in registers for the whole kernel. Where sequences
// bring several new tokens (a speculative verify step) and the group is small, a CTA serves up to 24 / group
// consecutive tokens of one sequence (rows token-major, up to three N tiles; 16 / group at head_dim 256), so
// their K/V are read once for all of them; each row masks the keys past its own position and before its own window. Each of the 4 warps copies
// its own 16 keys of every tile (cp.async, kStages deep, so enough bytes are in flight to keep HBM busy) and
// scores and accumulates them with its own online softmax, on a pipeline of its own (no CTA barrier per tile);
// the warps' states merge in shared memory at the end. With one split the CTA writes the output; otherwise it
// writes an unnormalized partial (O, max, sum) that merge_splits_kernel combines. Only blocks inside the window
// are read. Two builds per shape (DecodePlan): three CTAs per SM with shallow stages, for many short splits,
// and two with deeper ones, for long splits.
#pragma once

#include <cfloat>

#include "backend/attention_window.h"
#include "backend/cuda/block_reduce.cuh"
#include "backend/cuda/decode_mma.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma_attention.cuh"

namespace tide::cuda::mma {

// kS: K/V tiles in flight (decode_stages). Splits of one tile (the usual decode split at small batches) take one
// stage: its CTAs then fit beside the other stream's matmul CTAs.
// kFp8: an FP8 cache, staged raw (Fp8KvStage); the mma steps read the codes from the stage.
// kN: query rows in tiles of 8 (the mma's N): 1 for up to 8 rows (a decode with a group of at most 8), 2 for up
// to 16 (a group of 16, or several tokens of one sequence), 3 for up to 24 (several tokens; head_dim <= 128).
// kCtas: the CTAs per SM the launch bounds give registers for (mma_decode_plan's ctas_per_sm).
template <int D, int kS, bool kFp8, int kN, int kCtas>
struct DecodeConfig {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kKeys = 16 * kWarps;  // a tile: 16 keys per warp
  static constexpr int kStages = kS;
  static constexpr int kRows = 8 * kN;
  // A stage holds a tile as one slice per warp, its 16 keys in the layout of KvTileCopy<D, 16, 32, kFp8> (K
  // then V rows of bf16, or an FP8 stage): each warp copies and reads only its own slices, so the warps'
  // pipelines need no CTA barrier per tile. (All threads copying whole tiles, a CTA barrier publishing each,
  // was slower at long contexts: the loop is bound by its per-tile work, which warps left to drift apart overlap.)
  static constexpr int kSliceBytes = kFp8 ? Fp8KvStage<D, 16>::kBytes : 2 * 16 * D * 2;
  static constexpr int kStageBytes = kWarps * kSliceBytes;
  static constexpr int kStagedBytes = kStages * kStageBytes;
  // The end-of-loop merge reuses the K/V stages: per warp kRows rows of O (f32) and (max, sum) per row.
  static constexpr int kMergeBytes = kWarps * kRows * (D + 2) * 4;
  static constexpr size_t kSmemBytes = static_cast<size_t>(kStagedBytes > kMergeBytes ? kStagedBytes : kMergeBytes);
  static_assert(kCtas == 2 || (kCtas == 3 && kN == 1 && D <= 128), "three CTAs per SM: one row tile, D <= 128");
  static_assert(kN <= 2 || D <= 128, "three row tiles: D <= 128 (registers)");
  // (At head_dim 256 two stages of 64 KB leave room for one CTA per SM: the plan's two make two waves.)
  static_assert(D > 128 || kCtas * (kSmemBytes + 1024) <= 228 * 1024, "kCtas CTAs fit an SM's shared memory");
};

// K/V tiles in flight for splits of several tiles. Three CTAs per SM (many short splits) keep each under 76 KB of
// shared memory; two (long splits, where a CTA's own depth of loads is what keeps the memory busy) take
// three bf16 or five FP8 stages (an FP8 stage holds a bit over half the bytes).
constexpr int decode_stages(int d, bool fp8, int ctas_per_sm) {
  if (d > 128) return 2;
  if (ctas_per_sm == 3) return fp8 ? 3 : 2;
  return fp8 ? 5 : 3;
}

struct DecodeParams {
  PagedAttentionParams p;
  float* part_out;  // [T, Hq, splits, D] f32: sum_k e^(s_k - max) v_k of one split
  float* part_ml;   // [T, Hq, splits, 2] f32: (max score, sum_k e^(s_k - max)), max in raw score units
  int num_splits;
  int group;
  float scale_log2;
  // Tokens per CTA (mma_decode_tokens_per_cta): 1 and no sequence list, CTA x = token x; otherwise CTA x =
  // tiles_per_seq * s + j serves tokens [seq_starts[q] + j tokens_per_cta, ..) of the s-th listed sequence q (an
  // empty tile past its tokens does nothing).
  int tokens_per_cta;
  int tiles_per_seq;
  // Which rows of part_out / part_ml a token's splits use: 0, its token index; otherwise (a sequence list) the
  // s-th listed sequence's j-th token uses s * slot_tokens + j, so that the slots cover the listed tokens only.
  int slot_tokens;
};

// The token index of part_out / part_ml row `x` (DecodeParams::slot_tokens), or -1 for a row past its listed
// sequence's tokens.
__device__ inline int64_t slot_token(const DecodeParams& dp, int64_t x) {
  if (dp.slot_tokens == 0) return x;
  const PagedAttentionParams& p = dp.p;
  const int32_t seq = p.seq_list[x / dp.slot_tokens];
  const int64_t t = p.seq_starts[seq] + x % dp.slot_tokens;
  return t < p.seq_starts[seq + 1] ? t : -1;
}

__device__ inline int64_t sequence_of(const int32_t* seq_starts, int64_t num_seqs, int64_t t) {
  int64_t lo = 0, hi = num_seqs - 1;  // the last s with seq_starts[s] <= t
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (seq_starts[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// kFp8: K/V from an FP8 cache (KvTileCopy), its codes widened in registers (widen_pair), the keys' scales
// applied to the scores and probabilities.
//
// The keys are the mma's M and the query rows its N (S^T = K Q^T, O^T = V^T P^T): a group of 4 fills half of an
// 8-wide N where it would fill a quarter of a 16-row M, the output needs half the registers, the queries stay in
// registers, and P^T's fragments come from S^T's by one movmatrix per 8x8 (no shared memory).
template <int D, int kS, bool kFp8, int kN, int kCtas>
__global__ void __launch_bounds__(DecodeConfig<D, kS, kFp8, kN, kCtas>::kThreads, kCtas)
    decode_attention_kernel(const __grid_constant__ DecodeParams dp) {
  using C = DecodeConfig<D, kS, kFp8, kN, kCtas>;
  constexpr int R = C::kRows;
  const PagedAttentionParams& p = dp.p;
  const int64_t kv_head = blockIdx.y;
  const int split = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int group = dp.group;

  // This CTA's tokens t0 .. t0 + count - 1 (one sequence's, consecutive positions) and query rows.
  int64_t t0 = blockIdx.x, seq, slot_t0 = blockIdx.x;  // slot_t0: the part_out row of token t0
  int count = 1;
  if (dp.tokens_per_cta == 1 && p.seq_list == nullptr) {
    seq = sequence_of(p.seq_starts, p.num_seqs, t0);
  } else {
    const int64_t listed = blockIdx.x / dp.tiles_per_seq;
    const int64_t first = static_cast<int64_t>(blockIdx.x % dp.tiles_per_seq) * dp.tokens_per_cta;
    seq = p.seq_list != nullptr ? p.seq_list[listed] : listed;
    t0 = p.seq_starts[seq] + first;
    slot_t0 = dp.slot_tokens == 0 ? t0 : listed * dp.slot_tokens + first;
    count = static_cast<int>(min(int64_t{dp.tokens_per_cta}, p.seq_starts[seq + 1] - t0));
    if (count <= 0) {  // past the sequence's tokens
      begin_dependent_kernel();
      return;
    }
  }
  const int rows = count * group;
  const int64_t pos = p.positions[t0 + count - 1];    // the last token's: the keys end there
  const int64_t pos_first = pos - (count - 1);        // the first token's
  const int64_t first = p.window == 0 ? 0 : max(int64_t{0}, pos_first - p.window + 1);
  // Tiles start at multiples of kKeys; keys before `first` are zero-filled and masked, never read (their blocks
  // may be released). A key's tile, and the warp among whose 16 keys it is, then do not depend on which tokens
  // share the CTA: where the splits are single tiles in both (splits >= tiles, as at small batches) a verify
  // step's rows are the bits a decode step computes for the same token.
  const int64_t base = first / C::kKeys * C::kKeys;
  // Splits are whole tiles, so every CTA but the last of a token runs full tiles.
  const int64_t per_split = ((pos - base + 1 + dp.num_splits - 1) / dp.num_splits + C::kKeys - 1) / C::kKeys * C::kKeys;
  const int64_t lo = base + split * per_split, hi = min(pos + 1, lo + per_split);  // keys [lo, hi)
  const int64_t lo_read = max(lo, first);  // the first key loaded
  // Row r's slot: token t0 + r / group, head kv_head * group + r % group.
  const auto slot_of = [&](int r) {
    return ((slot_t0 + r / group) * p.num_heads + kv_head * group + r % group) * dp.num_splits + split;
  };
  const int32_t* table = p.block_tables + seq * p.max_blocks;
  // Positions, sequence starts and block tables are the step's inputs, which no kernel writes: read before
  // the wait, while the kernel before (RoPE and the KV store) still runs; with one-tile splits (short contexts,
  // where the latency of each load is on the step's path) the tile's block-table entries are fetched into L1
  // then too. The queries, the cache and the outputs only after the wait (launch.cuh).
  if constexpr (kS == 1) {
    if (lo < hi && tid == 0) {
      asm volatile("prefetch.global.L1 [%0];" ::"l"(table + p.block_div.div(static_cast<uint32_t>(lo))));
    }
  }
  begin_dependent_kernel();
  if (lo >= hi) {  // an empty split (short context): contributes nothing to the merge
    for (int r = tid; r < rows; r += C::kThreads) {
      dp.part_ml[slot_of(r) * 2] = -INFINITY;
      dp.part_ml[slot_of(r) * 2 + 1] = 0.0f;
    }
    return;
  }
  const int64_t num_tiles = (hi - lo + C::kKeys - 1) / C::kKeys;

  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t kv_base = smem_addr(smem);
  const int64_t row_size = (p.num_heads + 2 * p.num_heads_kv) * D;
  const bf16* q_rows = p.qkv + t0 * row_size + kv_head * group * D;
  // Each warp copies its own 16 keys of every tile into its slice of the stage and reads only those, so the
  // warps' pipelines run on their own: no CTA barrier per tile. Warp w's keys of tile `tile`: from key_of(tile).
  using Copy = KvTileCopy<D, 16, 32, kFp8>;
  const uint32_t slice0 = kv_base + warp * C::kSliceBytes;
  const auto key_of = [&](int64_t tile) { return lo + tile * C::kKeys + 16 * warp; };
  const auto load = [&](int stage, int64_t tile) {
    if (key_of(tile) < hi) Copy::load(slice0 + stage * C::kStageBytes, p, table, kv_head, key_of(tile), lo_read, hi, lane);
  };
#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < num_tiles) load(s, s);
    cp_async_commit();
  }
  // The queries load into registers while the first tiles are in flight.
  uint32_t q[kN][D / 16][2];
  load_decode_query<D, kFp8, kN>(q, q_rows, rows, group, row_size, lane);
  // The last key each of this thread's query rows (8 n + 2t + j) sees, and the first with a window; rows past
  // `rows` are zero queries whose results are never written.
  int64_t row_last[kN][2], row_first[kN][2];
#pragma unroll
  for (int n = 0; n < kN; ++n) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int r = min(8 * n + 2 * t + j, rows - 1);
      row_last[n][j] = pos_first + r / group;
      row_first[n][j] = window_first_key(row_last[n][j], p.window);
    }
  }

  float o[D / 16][kN][4] = {};
  // Per query row: the running max (the same in every lane of the row), and this lane's share of the sum
  // (its keys g and g + 8; the lanes' shares are added after the loop).
  float row_max[kN][2], row_sum[kN][2] = {};
#pragma unroll
  for (int n = 0; n < kN; ++n) row_max[n][0] = row_max[n][1] = -INFINITY;
  for (int64_t it = 0; it < num_tiles; ++it) {
    if constexpr (C::kStages == 1) {
      __syncwarp();  // every lane is done with the warp's slice of tile it - 1
      load(0, it);
      cp_async_commit();
      cp_async_wait<0>();
      __syncwarp();  // the warp's slice of tile `it`, copied by all its lanes
    } else {
      cp_async_wait<C::kStages - 2>();
      __syncwarp();  // the warp's slice of tile `it`; every lane is done with tile it - 1's slice
      const int64_t next = it + C::kStages - 1;
      if (next < num_tiles) load(static_cast<int>(next % C::kStages), next);
      cp_async_commit();
    }
    const int64_t k0 = key_of(it);  // this warp's keys [k0, k0 + 16)
    if (k0 >= hi) continue;         // the last tile may not reach this warp
    const uint32_t slice = slice0 + static_cast<int>(it % C::kStages) * C::kStageBytes;
    const uint32_t v_tile = slice + (kFp8 ? Fp8KvStage<D, 16>::kCodeBytes : 16 * D * 2);

    float s[kN][4] = {};
    decode_scores<D, kFp8, kN>(s, q, slice, lane);
    float v_scale[2] = {1.0f, 1.0f};  // keys g and g + 8
    if constexpr (kFp8) {
      const uint32_t scales = slice + Fp8KvStage<D, 16>::kScales;
      float k_scale[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        asm volatile("ld.shared.f32 %0, [%1];" : "=f"(k_scale[h]) : "r"(scales + (g + 8 * h) * 4));
        asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v_scale[h]) : "r"(scales + (16 + g + 8 * h) * 4));
      }
#pragma unroll
      for (int n = 0; n < kN; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] *= k_scale[e / 2];
      }
    }
    // Masks: keys at or past the split's end, a row's keys before its window (the tile's start is aligned
    // below the first token's), and with several tokens a row's keys past its position.
    if (k0 + 16 > hi || (p.window != 0 && k0 < pos - p.window + 1) || (count > 1 && k0 + 16 > pos_first + 1)) {
#pragma unroll
      for (int n = 0; n < kN; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t key = k0 + g + 8 * (e / 2);
          const int j = e % 2;
          if (key >= hi || key > row_last[n][j] || key < row_first[n][j]) s[n][e] = -INFINITY;
        }
      }
    }
    // Online softmax down the columns: a row's max over the warp's 16 keys is over the 8 lanes of its t.
    float correction[kN][2];
    bool rescale = false;
#pragma unroll
    for (int n = 0; n < kN; ++n) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        float mx = fmaxf(s[n][j], s[n][j + 2]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        mx = fmaxf(mx, row_max[n][j]);
        // A row may see none of the warp's keys yet (keys before its window, or with several tokens past its
        // position): then nothing changes (every term is 0).
        const float base = mx == -INFINITY ? 0.0f : mx * dp.scale_log2;
        correction[n][j] = ex2(row_max[n][j] * dp.scale_log2 - base);  // exactly 1 where the max stays
        rescale |= mx != row_max[n][j];
        row_max[n][j] = mx;
        s[n][j] = ex2(fmaf(s[n][j], dp.scale_log2, -base));
        s[n][j + 2] = ex2(fmaf(s[n][j + 2], dp.scale_log2, -base));
        row_sum[n][j] = row_sum[n][j] * correction[n][j] + s[n][j] + s[n][j + 2];
      }
    }
    // Once a row's max settles its correction is exactly 1: the output is rescaled only when some max moved.
    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int m = 0; m < D / 16; ++m) {
#pragma unroll
        for (int n = 0; n < kN; ++n) {
          o[m][n][0] *= correction[n][0], o[m][n][1] *= correction[n][1];
          o[m][n][2] *= correction[n][0], o[m][n][3] *= correction[n][1];
        }
      }
    }
    // P^T (times the keys' V scales with FP8) as B fragments: the bf16 head and tail (split_bf16: as accurate
    // as f32 probabilities, for twice the P V mmas, which this memory-bound kernel has time for) of each 8x8
    // of S^T's layout, transposed.
    uint32_t b[kN][2], b_tail[kN][2];
#pragma unroll
    for (int n = 0; n < kN; ++n) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t head, tail;
        split_bf16(s[n][2 * h] * v_scale[h], s[n][2 * h + 1] * v_scale[h], head, tail);
        b[n][h] = transpose_8x8(head);
        b_tail[n][h] = transpose_8x8(tail);
      }
    }
    decode_pv<D, kFp8, kN>(o, b, b_tail, v_tile, lane);
  }
  cp_async_wait<0>();
  __syncthreads();  // the K/V stages are free: they hold the warps' states now

  float* o_s = reinterpret_cast<float*>(smem);  // [warp][R][D]
  float* ml_s = o_s + C::kWarps * R * D;         // [warp][R][2]
#pragma unroll
  for (int n = 0; n < kN; ++n) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float l = row_sum[n][j];
      l += __shfl_xor_sync(0xffffffffu, l, 4);
      l += __shfl_xor_sync(0xffffffffu, l, 8);
      l += __shfl_xor_sync(0xffffffffu, l, 16);
      const int r = 8 * n + 2 * t + j;
      float* row = o_s + (warp * R + r) * D;
#pragma unroll
      for (int m = 0; m < D / 16; ++m) {
        const int2 dims = decode_dims<D, kFp8>(m, lane);
        row[dims.x] = o[m][n][j];
        row[dims.y] = o[m][n][j + 2];
      }
      if (g == 0) {
        ml_s[(warp * R + r) * 2] = row_max[n][j];
        ml_s[(warp * R + r) * 2 + 1] = l;
      }
    }
  }
  __syncthreads();

  for (int i = tid; i < rows * D; i += C::kThreads) {
    const int r = i / D, e = i % D;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < C::kWarps; ++w) m_all = fmaxf(m_all, ml_s[(w * R + r) * 2]);
    float l_all = 0.0f, o_all = 0.0f;
    // A row that saw no key of this split (with several tokens per CTA, a split past an earlier token's
    // position) stays (max -inf, sum 0, O 0), as an empty split, which the merge weighs 0.
    if (m_all != -INFINITY) {
#pragma unroll
      for (int w = 0; w < C::kWarps; ++w) {
        const float weight = ex2((ml_s[(w * R + r) * 2] - m_all) * dp.scale_log2);  // 0 for an idle warp
        l_all += weight * ml_s[(w * R + r) * 2 + 1];
        o_all += weight * o_s[(w * R + r) * D + e];
      }
    }
    if (dp.num_splits == 1) {
      p.out[((t0 + r / group) * p.num_heads + kv_head * group + r % group) * D + e] = __float2bfloat16(o_all / l_all);
    } else {
      const int64_t slot = slot_of(r);
      dp.part_out[slot * D + e] = o_all;
      if (e == 0) {
        dp.part_ml[slot * 2] = m_all;
        dp.part_ml[slot * 2 + 1] = l_all;
      }
    }
  }
}

// Combines the splits of one (token, query head): out = sum_s w_s O_s / sum_s w_s l_s, w_s = 2^((m_s - M) c).
// Its loads are independent, so all are in flight together: the splits' (max, sum) one per thread, then the
// partial outputs in float4 columns, each thread a strided share of the splits with four loads in flight, the
// shares summed in a fixed order. (A loop over the splits per element, each load waiting for the last, put a
// chain of dependent loads on the attention chain's critical path.)
constexpr int kMergeThreads = 256;
static __global__ void __launch_bounds__(kMergeThreads) merge_splits_kernel(const __grid_constant__ DecodeParams dp) {
  constexpr int kMaxSplits = 128;  // mma_decode_plan's bound
  constexpr int kInFlight = 4;
  __shared__ float weight[kMaxSplits], weighted_sum[kMaxSplits];
  __shared__ float shared[kMergeThreads / 32];
  __shared__ float4 columns[kMergeThreads];
  __shared__ float lane_sums[kMergeThreads];
  begin_dependent_kernel();
  const PagedAttentionParams& p = dp.p;
  const int d = static_cast<int>(p.head_dim), splits = dp.num_splits, tid = static_cast<int>(threadIdx.x);
  const int64_t token = slot_token(dp, blockIdx.x);
  if (token < 0) return;  // a listed sequence has fewer tokens than slot_tokens
  const int64_t slot0 = (static_cast<int64_t>(blockIdx.x) * p.num_heads + blockIdx.y) * splits;
  const float m = tid < splits ? dp.part_ml[(slot0 + tid) * 2] : -INFINITY;
  const float l = tid < splits ? dp.part_ml[(slot0 + tid) * 2 + 1] : 0.0f;
  const float m_all = block_max<kMergeThreads>(m, shared);  // its barriers publish nothing yet
  // 0 for an empty split (max -inf, sum 0), whose partial output was never written.
  const float w = m == -INFINITY ? 0.0f : ex2((m - m_all) * dp.scale_log2);
  if (tid < splits) {
    weight[tid] = w;
    weighted_sum[tid] = w == 0.0f ? 0.0f : l * w;
  }
  __syncthreads();

  const int groups = d / 4, lanes = kMergeThreads / groups;  // float4 columns x shares of the splits
  const int column = tid % groups, lane = tid / groups;
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float l_share = 0.0f;  // the same share of the sums (kept by every column's thread; the first column's used)
  for (int s0 = lane; s0 < splits; s0 += kInFlight * lanes) {
    float4 v[kInFlight];
    float ws[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int s = s0 + u * lanes;
      ws[u] = s < splits ? weight[s] : 0.0f;
      v[u] = ws[u] != 0.0f ? *reinterpret_cast<const float4*>(dp.part_out + (slot0 + s) * d + 4 * column)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      o.x += ws[u] * v[u].x, o.y += ws[u] * v[u].y, o.z += ws[u] * v[u].z, o.w += ws[u] * v[u].w;
      const int s = s0 + u * lanes;
      l_share += s < splits ? weighted_sum[s] : 0.0f;
    }
  }
  columns[tid] = o;
  if (column == 0) lane_sums[lane] = l_share;
  __syncthreads();
  if (tid < groups) {
    // The lanes' shares in lane order, for the outputs and the sums alike: with at most `lanes` splits each
    // lane holds one, and empty splits (zeros) before the others change nothing, so a token's result does not
    // depend on where its first tile falls among the CTA's splits (a verify step's tokens share theirs).
    float4 sum = columns[tid];
    float l_all = lane_sums[0];
    for (int j = 1; j < lanes; ++j) {
      const float4 c = columns[j * groups + tid];
      sum.x += c.x, sum.y += c.y, sum.z += c.z, sum.w += c.w;
      l_all += lane_sums[j];
    }
    bf16* out = p.out + (token * p.num_heads + blockIdx.y) * d + 4 * tid;
    out[0] = __float2bfloat16(sum.x / l_all), out[1] = __float2bfloat16(sum.y / l_all);
    out[2] = __float2bfloat16(sum.z / l_all), out[3] = __float2bfloat16(sum.w / l_all);
  }
}

template <int D, int kS, bool kFp8, int kN, int kCtas>
void launch_decode_kernel(const DecodeParams& dp, dim3 grid, cudaStream_t stream) {
  using C = DecodeConfig<D, kS, kFp8, kN, kCtas>;
  const auto kernel = decode_attention_kernel<D, kS, kFp8, kN, kCtas>;
  static const bool configured = (configure_smem(kernel, C::kSmemBytes), true);
  (void)configured;
  launch_kernel(kernel, grid, C::kThreads, C::kSmemBytes, stream, dp);
}

// One-tile splits (one stage), or the plan's CTAs per SM and their stages.
template <int D, bool kFp8, int kN>
void launch_decode_variant(const DecodeParams& dp, dim3 grid, bool one_stage, int ctas_per_sm, cudaStream_t stream) {
  constexpr int kMost = kN == 1 && D <= 128 ? 3 : 2;  // mma_decode_plan never asks for more
  if (one_stage) {
    launch_decode_kernel<D, 1, kFp8, kN, kMost>(dp, grid, stream);
  } else if (kMost == 3 && ctas_per_sm == 3) {
    launch_decode_kernel<D, decode_stages(D, kFp8, kMost), kFp8, kN, kMost>(dp, grid, stream);
  } else {
    launch_decode_kernel<D, decode_stages(D, kFp8, 2), kFp8, kN, 2>(dp, grid, stream);
  }
}

template <int D>
void launch_decode(const PagedAttentionParams& p, int64_t max_keys, int64_t max_seq_tokens, float* part_out,
                   float* part_ml, const DecodePlan& plan, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const int group = static_cast<int>(p.num_heads / p.num_heads_kv);
  const int per_cta = mma_decode_tokens_per_cta(D, group, max_seq_tokens);
  const int tiles = static_cast<int>((max_seq_tokens + per_cta - 1) / per_cta);
  const int num_splits = plan.splits;
  const bool listed = p.seq_list != nullptr;
  const DecodeParams dp{p, part_out, part_ml, num_splits, group, p.scale * kLog2e, per_cta, tiles,
                        listed ? tiles * per_cta : 0};
  const int64_t ctas = mma_decode_ctas(D, p.num_tokens, p.num_seqs, group, max_seq_tokens, listed);
  const dim3 grid(static_cast<unsigned>(ctas), static_cast<unsigned>(p.num_heads_kv),
                  static_cast<unsigned>(num_splits));
  // A split covers at most this many tiles (the kernel rounds each split up to whole tiles).
  constexpr int64_t kKeys = DecodeConfig<D, 1, false, 1, 2>::kKeys;
  const int64_t split_tiles = ((max_keys + num_splits - 1) / num_splits + kKeys - 1) / kKeys;
  const bool fp8 = p.cache8 != nullptr, one_stage = split_tiles <= 1;
  const int rows = per_cta * group;
  if (rows <= 8) {
    fp8 ? launch_decode_variant<D, true, 1>(dp, grid, one_stage, plan.ctas_per_sm, stream)
        : launch_decode_variant<D, false, 1>(dp, grid, one_stage, plan.ctas_per_sm, stream);
  } else if (rows <= 16) {
    fp8 ? launch_decode_variant<D, true, 2>(dp, grid, one_stage, plan.ctas_per_sm, stream)
        : launch_decode_variant<D, false, 2>(dp, grid, one_stage, plan.ctas_per_sm, stream);
  } else if constexpr (D <= 128) {
    fp8 ? launch_decode_variant<D, true, 3>(dp, grid, one_stage, plan.ctas_per_sm, stream)
        : launch_decode_variant<D, false, 3>(dp, grid, one_stage, plan.ctas_per_sm, stream);
  }
  if (num_splits > 1) {
    TIDE_CHECK(num_splits <= kMergeThreads && num_splits <= 128);  // merge_splits_kernel's bounds
    const dim3 merge_grid(static_cast<unsigned>(mma_decode_slot_tokens(D, p.num_tokens, p.num_seqs, group, max_seq_tokens, listed)),
                          static_cast<unsigned>(p.num_heads));
    launch_kernel(merge_splits_kernel, merge_grid, kMergeThreads, 0, stream, dp);
  }
}

}  // namespace tide::cuda::mma
