// Pieces shared by the tensor-core attention kernels (prefill_attention.cuh, decode_attention.cuh):
// mma.sync m16n8k16 bf16 -> f32, ldmatrix, cp.async, the XOR-swizzled shared-memory tile layout and the
// loader that gathers a K/V tile from the paged cache through a block table. Included by the per-head_dim
// instantiation files only; not a public header.
#pragma once

#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/kernels.h"

namespace tide::cuda::mma {

// Per head_dim launchers, instantiated in attention_d<D>.cu.
template <int D>
void launch_prefill(const PagedAttentionParams& p, int64_t max_seq_tokens, cudaStream_t stream);
template <int D>
void launch_decode(const PagedAttentionParams& p, int64_t max_keys, int64_t max_seq_tokens, float* part_out,
                   float* part_ml, const DecodePlan& plan, cudaStream_t stream);
// The wgmma prefill kernel (wgmma_attention.cu): head_dim 128, a bf16 or FP8 cache.
void launch_wgmma_prefill(const PagedAttentionParams& p, int64_t max_seq_tokens, cudaStream_t stream);

constexpr float kLog2e = 1.4426950408889634f;

// --- PTX wrappers ---

// 16 bytes global -> shared, bypassing L1; zero-filled (nothing read) when !valid.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c[16x8] += a[16x16] b[16x8]; fragments as the PTX ISA lays them out for m16n8k16 (lane = 4 g + t: c holds
// rows g, g + 8 and columns 2t, 2t + 1).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// (x, y) as two bf16x2 words: `head` = their bf16 rounding, `tail` = the bf16 rounding of what head misses.
// An mma over head plus one over tail carries ~16 bits of each value instead of 8.
__device__ __forceinline__ void split_bf16(float x, float y, uint32_t& head, uint32_t& tail) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  const float2 r = __bfloat1622float2(h);
  head = *reinterpret_cast<const uint32_t*>(&h);
  tail = pack_bf16(x - r.x, y - r.y);
}

// Once per kernel and process: dynamic shared memory beyond 48 KB, and the largest shared-memory carveout so
// that two CTAs fit on an SM. Host calls only, nothing enqueued: launches stay CUDA-graph capturable.
template <typename Kernel>
void configure_smem(Kernel kernel, size_t bytes) {
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
}

// --- shared-memory tiles ---

// A tile is rows of D bf16 (D / 8 chunks of 16 bytes); chunk c of row r sits at chunk c ^ (r % 8), so the 8
// rows one ldmatrix phase reads (same logical chunk, consecutive rows) fall in 8 different bank groups.
// Needs D >= 64.
template <int D>
__device__ __forceinline__ uint32_t swizzle(int row, int chunk) {
  return static_cast<uint32_t>(row * (D * 2) + ((chunk ^ (row & 7)) << 4));
}

// --- FP8 K/V tiles ---
//
// An FP8 cache's tile is staged raw: cp.async copies each key's K and V codes (D bytes each) and their two
// f32 scales into a stage (KvTileCopy), as asynchronously as the bf16 cache's tiles and with half the bytes.
// Once the stage has landed the codes are widened to exact bf16 values (no scale): by decode in registers
// after ldmatrix (decode_attention.cuh), by prefill into swizzled bf16 K and V tiles (widen_kv_rows).
// The scales are applied where they cost one multiply per key instead of one per element: a score
// q . (c_k s_k) is (q . c_k) s_k, and p_k (c_k s_k) is (p_k s_k) c_k, so the kernels multiply a key's scores by
// its K scale and its probabilities by its V scale (row sums stay unscaled). Code rows are padded to D + 16
// bytes, so that 8 consecutive rows' same 16-byte chunk fall in 8 different bank groups.
template <int D, int kKeys>
struct Fp8KvStage {
  static constexpr int kRowBytes = D + 16;
  static constexpr int kCodeBytes = kKeys * kRowBytes;           // K codes, then V codes
  static constexpr int kScales = 2 * kCodeBytes;                 // then the K scales, then the V scales (f32)
  static constexpr int kBytes = kScales + 2 * kKeys * 4;
  static_assert(kBytes % 128 == 0, "stages and the tiles after them keep the swizzle's 128-byte alignment");
};

// 4 bytes global -> shared; zero-filled (nothing read) when !valid.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ float2 lds_f32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}

// prmt's selector that puts byte `lo` of a word in the low bytes of the low half and byte `hi` in those of the
// high half, each half's high byte filled with its byte's sign bit (a selector nibble of 8 + i replicates byte
// i's sign): halves (sext(b) << 8) | b, the code sign-extended to 16 bits.
constexpr uint32_t widen_selector(int lo, int hi) {
  return static_cast<uint32_t>(((8 | hi) << 12) | (hi << 8) | ((8 | lo) << 4) | lo);
}

// Two FP8 E4M3 codes of `word` (bytes `lo` and `hi`, selector = widen_selector(lo, hi)) times multiplier *
// 2^-120 (bf16x2 bits), rounded to bf16: the bits of widen_pair below multiplied by `multiplier` instead of 2^120.
// With multiplier = scale * 2^(120 - c) the values are the codes dequantized and scaled by 2^-c.
__device__ __forceinline__ uint32_t widen_pair_scaled(uint32_t word, uint32_t selector, uint32_t multiplier) {
  uint32_t t;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(t) : "r"(word), "r"(selector));
  const uint32_t bits = (t << 4) & 0x87F087F0u;
  const __nv_bfloat162 v = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&bits),
                                   *reinterpret_cast<const __nv_bfloat162*>(&multiplier));
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Two FP8 E4M3 codes of `word` as a pair of exact bf16 values (bf16x2 bits), bytes `lo` and `hi`
// (selector = widen_selector(lo, hi)). Shifting a half holding the sign-extended code left by 4 puts the code's
// sign at bf16's sign bit and its exponent and mantissa bits at bf16's (the bits between are the sign's copies,
// masked off), which reads as the code times 2^-120 (a subnormal code as a bf16 subnormal); one bf16 multiply
// by 2^120 makes it the code, exactly. Four instructions (prmt, shift, and, bf16x2 multiply), no conversion
// instruction (cvt runs at a quarter rate).
__device__ __forceinline__ uint32_t widen_pair(uint32_t word, uint32_t selector) {
  return widen_pair_scaled(word, selector, 0x7B807B80u);  // 2^120 in both halves
}

// 8 codes (two words) as 8 exact bf16 values in order (one 16-byte chunk of a tile row).
__device__ __forceinline__ uint4 widen8(uint32_t lo, uint32_t hi) {
  constexpr uint32_t kLow = widen_selector(0, 1), kHigh = widen_selector(2, 3);
  return make_uint4(widen_pair(lo, kLow), widen_pair(lo, kHigh), widen_pair(hi, kLow), widen_pair(hi, kHigh));
}

// widen8 times a multiplier (widen_pair_scaled).
__device__ __forceinline__ uint4 widen8_scaled(uint32_t lo, uint32_t hi, uint32_t multiplier) {
  constexpr uint32_t kLow = widen_selector(0, 1), kHigh = widen_selector(2, 3);
  return make_uint4(widen_pair_scaled(lo, kLow, multiplier), widen_pair_scaled(lo, kHigh, multiplier),
                    widen_pair_scaled(hi, kLow, multiplier), widen_pair_scaled(hi, kHigh, multiplier));
}

// Widens the kKeys rows of a landed FP8 stage's codes into the bf16 K and V tiles (widen8), spread over
// kThreads threads. Consecutive threads take consecutive rows of one chunk: conflict-free reads of the padded
// code rows and writes of the swizzled tiles.
template <int D, int kKeys, int kThreads>
__device__ __forceinline__ void widen_kv_rows(uint32_t k_tile, uint32_t v_tile, uint32_t stage, int tid) {
  using S = Fp8KvStage<D, kKeys>;
  constexpr int kChunks = D / 16;
#pragma unroll 2
  for (int j = tid; j < kKeys * kChunks; j += kThreads) {
    const int r = j % kKeys, c = j / kKeys;
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      const uint4 codes = lds128(stage + v * S::kCodeBytes + r * S::kRowBytes + c * 16);
      const uint32_t tile = v == 0 ? k_tile : v_tile;
      sts128(tile + swizzle<D>(r, 2 * c), widen8(codes.x, codes.y));
      sts128(tile + swizzle<D>(r, 2 * c + 1), widen8(codes.z, codes.w));
    }
  }
}

// Multiplies score (v = 0) or probability (v = 1) fragments by their keys' K or V scales from a landed FP8
// stage: s[m][j]'s columns are the stage's keys key0 + 8 j + 2 (lane % 4) + {0, 1} (rows g and g + 8 alike).
template <int D, int kKeys, int kM, int kN>
__device__ __forceinline__ void scale_by_keys(float (&s)[kM][kN][4], uint32_t stage, int v, int key0, int lane) {
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const int key = key0 + 8 * j + 2 * (lane % 4);
    const float2 scale = lds_f32x2(stage + Fp8KvStage<D, kKeys>::kScales + (v * kKeys + key) * 4);
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      s[m][j][0] *= scale.x, s[m][j][1] *= scale.y, s[m][j][2] *= scale.x, s[m][j][3] *= scale.y;
    }
  }
}
// --- K/V tile copies ---
//
// KvTileCopy::load gathers keys [k0, k0 + kKeys) of one KV head through the block table into a stage: K and V
// tiles in the swizzled bf16 layout, or an FP8 stage (Fp8KvStage: codes and scales). kThreads threads copy
// 16-byte chunks (cp.async); thread tid copies chunk tid % kChunks of rows tid / kChunks + i kRowsPerPass and,
// FP8, the K or V scale of row tid % kKeys. Keys outside [key_begin, key_end), and null blocks, are
// zero-filled without reading the cache, so nothing outside the window is read (a zero V row times a zero
// probability stays zero, where a stale row could hold NaN; a zero scale makes an FP8 row zero).
// (Looking a tile's blocks up one tile ahead of its copies, to take the table's latency off the copies, was
// slower on the H200: R7B FP8 decode at B=32 / 32K 18.7 against 17.8-17.9 ms per step with an FP8 cache.)
template <int D, int kKeys, int kThreads, bool kFp8>
struct KvTileCopy {
  static constexpr int kChunks = kFp8 ? D / 16 : D / 8;  // 16-byte chunks per row (codes or bf16)
  static constexpr int kRowsPerPass = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kKeys % kRowsPerPass == 0 && 2 * kKeys <= kThreads);

  // Starts the copies into `stage` (bf16: the K tile, the V tile kKeys D 2 bytes after it).
  __device__ static void load(uint32_t stage, const PagedAttentionParams& p, const int32_t* table, int64_t kv_head,
                              int64_t k0, int64_t key_begin, int64_t key_end, int tid) {
    if constexpr (kFp8) {
      load_fp8(stage, p, table, kv_head, k0, key_begin, key_end, tid);
    } else {
      load_bf16(stage, p, table, kv_head, k0, key_begin, key_end, tid);
    }
  }

 private:
  // One warp copying at most 32 keys (the decode kernel's slices): lane l looks up key k0 + l % kKeys and the
  // rows go to the lanes copying them by shuffle, one block-table lookup and division per key instead of one per
  // row of each lane. Otherwise each thread looks up the rows it copies.
  static constexpr bool kShuffleRows = kThreads == 32 && kKeys <= 32;

  // The cache row of `key` ((block * num_layers + layer) * 2 * block_size + offset: its K row, V is block_size
  // rows on) and its offset in the block; row -1 for a key not to read (outside [key_begin, key_end), or in a
  // released block). Cache rows number fewer than 2^31 (the host checks), so 32-bit arithmetic.
  __device__ static int2 cache_row_of(const PagedAttentionParams& p, const int32_t* table, int64_t key,
                                      int64_t key_begin, int64_t key_end) {
    if (key < key_begin || key >= key_end) return make_int2(-1, 0);
    const uint32_t k = static_cast<uint32_t>(key), b = p.block_div.div(k);
    const int offset = static_cast<int>(p.block_div.mod(k, b));
    const int32_t block = table[b];
    if (block < 0) return make_int2(-1, offset);
    const int block_size = static_cast<int>(p.block_size);
    return make_int2((block * static_cast<int>(p.num_layers) + static_cast<int>(p.layer)) * 2 * block_size + offset,
                     offset);
  }

  // Row r's cache row: from the lane that looked it up (kShuffleRows), else looked up here.
  __device__ static int row_of(int own_row, const PagedAttentionParams& p, const int32_t* table, int64_t k0, int r,
                               int64_t key_begin, int64_t key_end) {
    if constexpr (kShuffleRows) {
      return __shfl_sync(0xffffffffu, own_row, r);
    } else {
      return cache_row_of(p, table, k0 + r, key_begin, key_end).x;
    }
  }

  __device__ static void load_bf16(uint32_t stage, const PagedAttentionParams& p, const int32_t* table,
                                   int64_t kv_head, int64_t k0, int64_t key_begin, int64_t key_end, int tid) {
    const int chunk = tid % kChunks;
    const int64_t kv_size = p.num_heads_kv * D, v_rows = p.block_size * kv_size;
    const int own_row = kShuffleRows ? cache_row_of(p, table, k0 + tid % kKeys, key_begin, key_end).x : -1;
    const bf16* head_cache = p.cache + kv_head * D + chunk * 8;
#pragma unroll
    for (int r = tid / kChunks; r < kKeys; r += kRowsPerPass) {
      const int row = row_of(own_row, p, table, k0, r, key_begin, key_end);
      const bool valid = row >= 0;
      const bf16* src = valid ? head_cache + static_cast<int64_t>(row) * kv_size : p.cache;
      cp_async_16(stage + swizzle<D>(r, chunk), src, valid);
      cp_async_16(stage + kKeys * D * 2 + swizzle<D>(r, chunk), valid ? src + v_rows : src, valid);
    }
  }

  __device__ static void load_fp8(uint32_t stage, const PagedAttentionParams& p, const int32_t* table,
                                  int64_t kv_head, int64_t k0, int64_t key_begin, int64_t key_end, int tid) {
    using S = Fp8KvStage<D, kKeys>;
    const int chunk = tid % kChunks;
    const int64_t kv_size = p.num_heads_kv * D, v_rows = p.block_size * kv_size;
    // Thread tid's own key k0 + tid % kKeys: its row for the others (kShuffleRows) and its scale (copy_scales).
    const int2 own = cache_row_of(p, table, k0 + tid % kKeys, key_begin, key_end);
    const uint8_t* head_codes = p.cache8 + kv_head * D + chunk * 16;
#pragma unroll
    for (int r = tid / kChunks; r < kKeys; r += kRowsPerPass) {
      const int row = row_of(own.x, p, table, k0, r, key_begin, key_end);
      const bool valid = row >= 0;
      const uint8_t* src = valid ? head_codes + static_cast<int64_t>(row) * kv_size : p.cache8;
      cp_async_16(stage + r * S::kRowBytes + chunk * 16, src, valid);
      cp_async_16(stage + S::kCodeBytes + r * S::kRowBytes + chunk * 16, valid ? src + v_rows : src, valid);
    }
    copy_scales(stage, p, kv_head, tid, own);
  }

  // Thread kKeys v + r copies the K (v = 0) or V scale of row r, whose cache row and offset are `own`. Scales
  // [block, layer, K / V, head, offset]: a key's cache row less its offset is (block * layers + layer) 2 bs.
  __device__ static void copy_scales(uint32_t stage, const PagedAttentionParams& p, int64_t kv_head, int tid,
                                     int2 own) {
    if (tid >= 2 * kKeys) return;
    const int v = tid / kKeys;
    const int64_t hkv_block = p.num_heads_kv * p.block_size;
    const int64_t at = own.x < 0 ? 0
                                 : static_cast<int64_t>(own.x - own.y) * p.num_heads_kv + v * hkv_block +
                                       kv_head * p.block_size + own.y;
    cp_async_4(stage + Fp8KvStage<D, kKeys>::kScales + tid * 4, p.scales + at, own.x >= 0);
  }
};

}  // namespace tide::cuda::mma
