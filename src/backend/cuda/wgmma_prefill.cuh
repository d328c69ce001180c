// The wgmma prefill attention kernel's (wgmma_attention.cu) shared-memory and register plan, the device
// helpers of its FP8-cache path, and its output store. Included by wgmma_attention.cu only; not a public header.
#pragma once

#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/mma_attention.cuh"

namespace tide::cuda::mma {

// kFp8: an FP8 cache. S = Q K^T runs on FP8 wgmma over the K codes as they are stored: the producer copies
// a tile's K codes straight into its stage (a key's 128 codes are one 128-byte row of the swizzle) and its K
// scales beside it, and each consumer warpgroup splits its Q rows once per item into two e4m3 parts, high and
// low, with a power of two per row (split_e4m3x2: high + low is the bf16 value, exactly or within 2^-17 of
// the row's largest magnitude), so two FP8 products give the scores of bf16 Q against the codes;
// the consumers multiply a key's scores by its K scale and the row's power of two back (in the softmax's
// scale). V goes through a code buffer of its own: the producer stages a tile's V codes and scales there with
// cp.async, dequantizes them into the stage's bf16 V tile once the consumers have released it, then at once
// starts the next tile's copies: a tile's loads run while the consumers work on the two tiles before it. The
// dequantization is a code times its key's scale times 2^-kFp8Shift (widen8_scaled: four instructions per two
// codes), exact in bf16 because a KV scale has 4 significant bits (fp8::kv_scale_for_amax); the output's
// normalization takes 2^kFp8Shift back (a power of two: exact). The shift keeps every multiplier,
// scale * 2^(120 - kFp8Shift), within bf16's range for scales up to 2^71 (larger ones, V values past 2^79, are
// clamped), and values down to 2^-62 normal (smaller ones round to bf16 subnormals).
constexpr int kFp8Shift = 64;

template <bool kFp8>
struct WgmmaPrefillConfig {
  static constexpr int kD = 128;
  static constexpr int kConsumers = 2;                 // warpgroups of 64 rows
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kRows = 64 * kConsumers;
  static constexpr int kKeys = 128;                    // keys per tile: one wgmma's N
  static constexpr int kStages = 2;  // a third (bf16; FP8's does not fit) was no faster
  static constexpr int kQBytes = kRows * kD * 2;
  static constexpr int kTileBytes = kKeys * kD * 2;                  // a bf16 tile
  static constexpr int kCodeBytes = kKeys * kD;                      // a tile's codes
  static constexpr int kKTileBytes = kFp8 ? kCodeBytes : kTileBytes;  // a stage's K: codes with FP8
  static constexpr int kStageBytes = kKTileBytes + kTileBytes;       // K, V
  static constexpr int kQSplitBytes = kFp8 ? 2 * kRows * kD : 0;     // FP8: Q's high parts, then its low parts
  static constexpr int kCodeBufferBytes = kFp8 ? kCodeBytes + kKeys * 4 : 0;  // FP8: V codes, V scales
  static constexpr int kKScaleBytes = kFp8 ? kStages * kKeys * 4 : 0;         // FP8: each stage's K scales
  static constexpr int kRowScaleBytes = kFp8 ? kRows * 4 : 0;                 // FP8: each row's 2^-(power)
  static constexpr int kBarrierBytes = 2 * kStages * 8 + 2 * 8;  // full and empty per stage, Q's full and empty
  // Up to kStagedSeqs listed sequences' token counts are staged in shared memory, so that the work items of
  // sequences with fewer row tiles than the longest are skipped without a global load.
  static constexpr int kStagedSeqs = 1024;
  static constexpr int kStagedBytes = kStagedSeqs * 4;
  static constexpr int kAlign = 1024;                  // the swizzle pattern repeats every 8 rows of 128 bytes
  static constexpr size_t kSmemBytes =
      kAlign + kQBytes + kStages * kStageBytes + kQSplitBytes + kCodeBufferBytes + kKScaleBytes + kRowScaleBytes +
      kBarrierBytes + kStagedBytes;
  // The launch gives every thread 168 registers (64K / 384, rounded down to 8); the producer gives some up
  // (setmaxnreg) for the consumers to claim: (168 - producer) 128 >= (consumer - 168) 256. The bf16 producer
  // needs no more than 72; its consumers then get 216, and the kernel ran 6-7% faster than with 208 (neither
  // spills: the compiler schedules the consumers' loop differently with 8 more registers). With fewer than 72
  // the bf16 producer spills (224 for the consumers: 17% slower), and the FP8 producer spills below 88.
  static constexpr int kLaunchRegisters = 168;
  static constexpr int kProducerRegisters = kFp8 ? 88 : 72;
  static constexpr int kConsumerRegisters = kFp8 ? 208 : 216;
  static_assert((kLaunchRegisters - kProducerRegisters) * 128 >= (kConsumerRegisters - kLaunchRegisters) * 256 &&
                    kLaunchRegisters * kThreads <= 65536,
                "the consumers claim only what the producer gives up");
  static_assert(kStageBytes % kAlign == 0 && kKTileBytes % kAlign == 0, "every tile keeps the swizzle's alignment");
  static_assert(kSmemBytes <= 227 * 1024, "fits in an SM's shared memory");
};

// Multiplies the scores of a thread's accumulator fragments by their keys' K scales: s[4 j + 2 h + e] is key
// 8 j + 2 (lane % 4) + e of the tile.
__device__ __forceinline__ void scale_by_keys(float (&s)[64], uint32_t scales, int lane) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const float2 scale = lds_f32x2(scales + (8 * j + 2 * (lane % 4)) * 4);
    s[4 * j] *= scale.x, s[4 * j + 1] *= scale.y, s[4 * j + 2] *= scale.x, s[4 * j + 3] *= scale.y;
  }
}

// Two bf16 values (bf16x2 bits) times `up` (a power of two that takes the row's largest magnitude into
// (224, 448]) as two e4m3 pairs: hi = e4m3(x), lo = e4m3(x - hi), each pair's first value in the low byte.
// A bf16 value has 8 significant bits and hi keeps the top 4 rounded, so x - hi has at most 4 and is an
// e4m3 value wherever it is a normal one: hi + lo = x exactly, and where x - hi falls among e4m3's
// subnormals (below 2^-6) within 2^-10, under 2^-17 of the largest magnitude.
__device__ __forceinline__ void split_e4m3x2(uint32_t bf16x2, float up, uint32_t& hi, uint32_t& lo) {
  const float x0 = __uint_as_float(bf16x2 << 16) * up, x1 = __uint_as_float(bf16x2 & 0xFFFF0000u) * up;
  uint16_t h, l;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(x1), "f"(x0));
  uint32_t back;  // hi as f16x2 (exact)
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(back) : "h"(h));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&back));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(l) : "f"(x1 - b.y), "f"(x0 - b.x));
  hi = h, lo = l;
}

// The bf16x2 multiplier of widen8_scaled for a key's scale: scale * 2^(120 - kFp8Shift) in both halves,
// clamped to bf16's largest finite value.
__device__ __forceinline__ uint32_t fp8_tile_multiplier(float scale) {
  const float m = fminf(scale * 0x1p56f, 3.3895314e38f);
  static_assert(120 - kFp8Shift == 56, "the multiplier's power of two");
  return pack_bf16(m, m);
}

// Where code chunk c (16 bytes) of row r sits in its 128-byte row of the FP8 code buffer: an odd row's two
// halves swapped, so that two adjacent rows' same chunks fall in different bank groups.
__device__ __forceinline__ uint32_t code_chunk_offset(int r, int c) {
  return static_cast<uint32_t>((c ^ ((r & 1) * 4)) * 16);
}

// A consumer thread's two rows of an item's output, out = O / l times `out_scale` in bf16: rows `row` and
// row + 8 of the item (row = (token - the sequence's first) group + query head in the group), skipped past
// `num_rows`; each quad of lanes writes 16 contiguous bytes per 8 columns of a row.
__device__ __forceinline__ void store_rows(const PagedAttentionParams& p, const float (&o)[64],
                                           const float (&row_sum)[2], float out_scale, int row, int num_rows,
                                           int seq_begin, int group, int kv_head, int lane) {
  constexpr int D = WgmmaPrefillConfig<false>::kD;  // both kernels' head_dim
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = row_sum[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int r = row + 8 * h;
    if (r >= num_rows) continue;
    const float inv = l > 0.0f ? out_scale / l : 0.0f;
    bf16* out = p.out + static_cast<int64_t>(seq_begin + r / group) * p.num_heads * D +
                (kv_head * group + r % group) * D + 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<uint32_t*>(out + 8 * j) = pack_bf16(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
    }
  }
}

}  // namespace tide::cuda::mma
