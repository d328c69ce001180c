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
void launch_decode(const PagedAttentionParams& p, int64_t max_keys, float* part_out, float* part_ml, int num_splits,
                   cudaStream_t stream);

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

// The S = Q K^T and O += P V steps of one warp, on 16 query rows and 16 keys, shared by both kernels.
// q_tile: Q rows [q_row, q_row + 16); k/v_tile: keys [key, key + 16). s: two 16x8 score tiles.
template <int D>
__device__ __forceinline__ void score_16x16(float (&s)[2][4], uint32_t q_tile, int q_row, uint32_t k_tile, int key,
                                            int lane) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4], b[4];
    ldmatrix_x4(a, q_tile + swizzle<D>(q_row + lane % 16, 2 * kk + lane / 16));
    ldmatrix_x4(b, k_tile + swizzle<D>(key + (lane / 16) * 8 + lane % 8, 2 * kk + (lane / 8) % 2));
    mma_bf16(s[0], a, b[0], b[1]);
    mma_bf16(s[1], a, b[2], b[3]);
  }
}

// 8 FP8 codes times their vector's scale, as 8 bf16 (one 16-byte chunk of a tile row).
__device__ __forceinline__ uint4 dequantize8(uint2 codes, float scale) {
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = i < 2 ? codes.x : codes.y;
    const auto pair = static_cast<__nv_fp8x2_storage_t>(word >> (16 * (i % 2)));
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3);
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
    const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scale, f.y * scale);
    out[i] = *reinterpret_cast<const uint32_t*>(&b);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// load_kv_tile from an FP8 cache (p.cache8, p.scales): the same rows and chunks, each chunk's 8 codes read
// into registers, dequantized with the row's scale (code x scale rounded to bf16) and stored to the tile;
// synchronous, where the bf16 cache's chunks are copied asynchronously.
template <int D, int kKeys, int kThreads>
__device__ __forceinline__ void load_kv_tile_fp8(uint32_t k_tile, uint32_t v_tile, const PagedAttentionParams& p,
                                                 const int32_t* table, int64_t kv_head, int64_t k0,
                                                 int64_t key_begin, int64_t key_end, int tid) {
  constexpr int kChunks = D / 8;
  constexpr int kRowsPerPass = kThreads / kChunks;
  constexpr int kPasses = kKeys / kRowsPerPass;
  static_assert(kThreads % kChunks == 0 && kKeys % kRowsPerPass == 0);
  const int chunk = tid % kChunks;
  const int64_t kv_size = p.num_heads_kv * D;
  const int block_size = static_cast<int>(p.block_size), num_layers = static_cast<int>(p.num_layers);
  const int layer = static_cast<int>(p.layer), heads = static_cast<int>(p.num_heads_kv);
  // Loads of kGroup rows first, so they are in flight together, then their stores (registers bound the group).
  constexpr int kGroup = kPasses < 4 ? kPasses : 4;
  static_assert(kPasses % kGroup == 0);
#pragma unroll
  for (int i0 = 0; i0 < kPasses; i0 += kGroup) {
    uint2 codes[kGroup][2];
    float scales[kGroup][2];
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      const int r = tid / kChunks + (i0 + i) * kRowsPerPass;
      const int64_t key = k0 + r;
      codes[i][0] = codes[i][1] = make_uint2(0, 0);
      scales[i][0] = scales[i][1] = 0.0f;
      if (key >= key_begin && key < key_end) {
        const int k = static_cast<int>(key);
        const int32_t block = table[k / block_size];
        if (block >= 0) {
          const int layer_kv = (block * num_layers + layer) * 2;  // K; V is layer_kv + 1
          const int row = layer_kv * block_size + k % block_size;
          const uint8_t* src = p.cache8 + static_cast<int64_t>(row) * kv_size + kv_head * D + chunk * 8;
          codes[i][0] = __ldg(reinterpret_cast<const uint2*>(src));
          codes[i][1] = __ldg(reinterpret_cast<const uint2*>(src + block_size * kv_size));
          const int64_t at = (static_cast<int64_t>(layer_kv) * heads + kv_head) * block_size + k % block_size;
          scales[i][0] = __ldg(p.scales + at);
          scales[i][1] = __ldg(p.scales + at + static_cast<int64_t>(heads) * block_size);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      const int r = tid / kChunks + (i0 + i) * kRowsPerPass;
      sts128(k_tile + swizzle<D>(r, chunk), dequantize8(codes[i][0], scales[i][0]));
      sts128(v_tile + swizzle<D>(r, chunk), dequantize8(codes[i][1], scales[i][1]));
    }
  }
}

// Gathers keys [k0, k0 + kKeys) of one KV head into K and V tiles (kThreads threads, 16-byte chunks): each
// key's physical block comes from the block table. Keys outside [key_begin, key_end), and null blocks, are
// zero-filled without reading the cache, so nothing outside the window is read (a zero V row times a zero
// probability stays zero, where a stale row could hold NaN). kFp8: from an FP8 cache (load_kv_tile_fp8).
template <int D, int kKeys, int kThreads, bool kFp8 = false>
__device__ __forceinline__ void load_kv_tile(uint32_t k_tile, uint32_t v_tile, const PagedAttentionParams& p,
                                             const int32_t* table, int64_t kv_head, int64_t k0, int64_t key_begin,
                                             int64_t key_end, int tid) {
  if constexpr (kFp8) {
    return load_kv_tile_fp8<D, kKeys, kThreads>(k_tile, v_tile, p, table, kv_head, k0, key_begin, key_end, tid);
  }
  constexpr int kChunks = D / 8;
  constexpr int kRowsPerPass = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && kKeys % kRowsPerPass == 0);
  const int chunk = tid % kChunks;
  const int64_t kv_size = p.num_heads_kv * D;
  const int block_size = static_cast<int>(p.block_size), num_layers = static_cast<int>(p.num_layers);
  const int layer = static_cast<int>(p.layer);
#pragma unroll
  for (int r = tid / kChunks; r < kKeys; r += kRowsPerPass) {
    const int64_t key = k0 + r;
    const bf16* src = p.cache;
    bool valid = false;
    if (key >= key_begin && key < key_end) {
      const int k = static_cast<int>(key);
      const int32_t block = table[k / block_size];
      if (block >= 0) {
        // Cache rows of kv_size elements: fewer than 2^31 of them (the host checks), so 32-bit arithmetic.
        const int row = (block * num_layers + layer) * 2 * block_size + k % block_size;
        src = p.cache + static_cast<int64_t>(row) * kv_size + kv_head * D + chunk * 8;
        valid = true;
      }
    }
    cp_async_16(k_tile + swizzle<D>(r, chunk), src, valid);
    cp_async_16(v_tile + swizzle<D>(r, chunk), valid ? src + block_size * kv_size : src, valid);
  }
}

}  // namespace tide::cuda::mma
