// Prefill / chunked-prefill attention on Hopper's warpgroup instructions (wgmma), head_dim 128, over the
// paged window-aware KV cache: the FlashAttention-3 organization with tide's cache and masking rules.
//
// A work item is kRows = 128 consecutive packed rows of one sequence and one KV head, a row being (new token,
// query head of the group), as a CTA of the mma.sync kernel (prefill_attention.cuh) serves them. The kernel is
// persistent: one CTA per SM takes one item of each round of gridDim.x items, longest first, and its three
// warpgroups keep their pipeline across items (the next item's Q and first tiles load while the consumers
// finish the last one):
//  - warpgroup 0, the producer, gives most of its registers away (setmaxnreg) and gathers tiles of kKeys keys
//    through the block table with cp.async into a ring of kStages stages, each copy counted on the stage's
//    "full" mbarrier (cp.async.mbarrier.arrive), so no producer thread ever waits for its own copies; keys
//    outside the rows' [window start, last position] range and null blocks are zero-filled, never read;
//  - warpgroups 1 and 2, the consumers, own 64 rows each: S = Q K^T as 8 wgmma m64n128k16 with Q and K in
//    shared memory, masking (boundary tiles only) and the online softmax in registers, then O += P V as 8
//    wgmma with P straight from the S accumulators (the accumulator layout is the A-fragment layout) and V
//    read transposed from shared memory; each consumer warp arrives on the stage's "empty" mbarrier once its
//    products have read it.
// Tiles are 128-byte-swizzled panels of 64 dims (wgmma's canonical layout): row r's 16-byte chunk c of a panel
// at r * 128 + ((c ^ (r % 8)) * 16). Key tiles start at multiples of kKeys wherever the row tile starts, as
// in the mma.sync kernel, so a row sees the same tiles in the same order however its sequence was cut into
// chunks, and a prompt gives the same outputs with or without a reused prefix.
#include <algorithm>
#include <cfloat>

#include "backend/cuda/launch.cuh"
#include "backend/cuda/prefill_attention.cuh"
#include "backend/cuda/prefill_tiling.h"
#include "backend/cuda/wgmma.cuh"
#include "backend/cuda/wgmma_prefill.cuh"

namespace tide::cuda::mma {
namespace {

// A persistent kernel: each CTA serves one item per round, in the order of prefill_scheduled_item
// (prefill_tiling.h: the rounds run back and forth over the CTAs; prefill_item: heads innermost, the
// sequences' last row tiles first). The stage ring runs on across items, and the producer loads the next
// item's Q once the consumers are done with the current one's (q_empty: their last S = Q K^T, or with FP8
// their split of it), so the next item's first tiles land while they finish.
template <bool kFp8>
__global__ void __launch_bounds__(WgmmaPrefillConfig<kFp8>::kThreads, 1)
    wgmma_prefill_kernel(const __grid_constant__ PrefillParams pp) {
  begin_dependent_kernel();
  using C = WgmmaPrefillConfig<kFp8>;
  constexpr int D = C::kD;
  const PagedAttentionParams& p = pp.p;
  const int group = pp.group;
  const int window = static_cast<int>(p.window);
  const int num_items = static_cast<int>(p.num_seqs) * pp.tiles_per_seq * static_cast<int>(p.num_heads_kv);

  extern __shared__ unsigned char smem_raw[];
  const uint32_t base = (smem_addr(smem_raw) + C::kAlign - 1) / C::kAlign * C::kAlign;
  const uint32_t q_tile = base;
  const uint32_t stages = base + C::kQBytes;
  const uint32_t q_split = stages + C::kStages * C::kStageBytes;  // FP8 only, as the next four
  const uint32_t code_buffer = q_split + C::kQSplitBytes;
  const uint32_t k_scales = code_buffer + C::kCodeBufferBytes;
  const uint32_t row_scales = k_scales + C::kKScaleBytes;
  const uint32_t full_bar = row_scales + C::kRowScaleBytes;
  const uint32_t empty_bar = full_bar + C::kStages * 8;
  const uint32_t q_full = empty_bar + C::kStages * 8, q_empty = q_full + 8;
  const int tid = static_cast<int>(threadIdx.x);
  const int warpgroup = tid / 128;
  // Listed sequence i's new-token count is staged[i] when the launch lists few enough sequences (else -1: read
  // from global memory), so that items past a sequence's row tiles are skipped without a global load.
  const uint32_t staged = q_empty + 8;
  for (int i = tid; i < C::kStagedSeqs; i += C::kThreads) {
    int count = -1;
    if (p.num_seqs <= C::kStagedSeqs && i < p.num_seqs) {
      const int seq = p.seq_list != nullptr ? p.seq_list[i] : i;
      count = p.seq_starts[seq + 1] - p.seq_starts[seq];
    }
    sts32(staged + 4 * i, static_cast<uint32_t>(count));
  }
  // Whether an item's row tile is known to be empty from the staged counts (ranks past a shorter sequence's
  // rows); a sequence whose count is not staged is checked on its row tile (row0 >= num_rows).
  const auto staged_empty = [&](const PrefillItem& it) {
    const int count = it.listed < C::kStagedSeqs ? static_cast<int>(lds32(staged + 4 * it.listed)) : -1;
    return count >= 0 && prefill_rank_is_empty(it.rank, pp.tiles_per_seq, C::kRows, count, group);
  };
  // This CTA's item of round `round` (prefill_scheduled_item: -1 past the last round, num_items for none).
  const auto item_of = [&](int round) {
    return prefill_scheduled_item(round, static_cast<int>(blockIdx.x), static_cast<int>(gridDim.x), num_items);
  };
  // Work item `item` and its row tile; false when it has no row to compute.
  const auto item_tile = [&](int item, PrefillItem& work, PrefillRowTile& rt) {
    if (item >= num_items) return false;  // a round with no item for this CTA
    work = prefill_item(item, static_cast<int>(p.num_seqs), static_cast<int>(p.num_heads_kv));
    if (staged_empty(work)) return false;
    rt = prefill_row_tile_at<C::kRows>(pp, work.listed, work.rank);
    return rt.row0 < rt.num_rows;
  };

  if (tid == 0) {
    for (int s = 0; s < C::kStages; ++s) {
      // Every producer thread's copies; with FP8 also every producer thread once its V is written.
      mbar_init(full_bar + 8 * s, kFp8 ? 256 : 128);
      mbar_init(empty_bar + 8 * s, 4 * C::kConsumers);       // one arrival per consumer warp
    }
    mbar_init(q_full, 128);
    mbar_init(q_empty, 4 * C::kConsumers);
  }
  __syncthreads();

  if (warpgroup == 0) {
    // --- producer ---
    wgmma::release_registers<C::kProducerRegisters>();
    const int chunk = tid % 16, row_in_pass = tid / 16;  // 8 rows per pass of 128 threads
    const int64_t row_size = (p.num_heads + 2 * p.num_heads_kv) * D;
    const int block_size = static_cast<int>(p.block_size), num_layers = static_cast<int>(p.num_layers);
    const int layer = static_cast<int>(p.layer);
    const int64_t kv_size = p.num_heads_kv * D;
    const int warp = tid / 32, lane = tid % 32;
    int ring = 0;   // tiles this CTA has put in the stage ring
    int served = 0; // items this CTA has served
    for (int round = 0;; ++round) {
      const int item = item_of(round);
      if (item < 0) break;
      PrefillItem work;
      PrefillRowTile rt;
      if (!item_tile(item, work, rt)) continue;
      const int kv_head = work.kv_head;
      const int row0 = rt.row0, num_rows = rt.num_rows, seq_begin = rt.seq_begin, pos_max = rt.pos_max;
      const PrefillTiles tiles = prefill_tiles(rt.pos_first, pos_max, window, C::kKeys);
      const int first_read = tiles.first_read, key_lo = tiles.key_lo, num_tiles = tiles.num_tiles;
      const int32_t* table = p.block_tables + rt.seq * p.max_blocks;
      // Warp w copies keys [32 w, 32 w + 32) of a tile; lane l looks up key 32 w + l's cache row (K; V is
      // block_size rows on), -1 for a key not to read, and the warp's lanes take the rows by shuffle: one
      // block-table lookup per key instead of one per 16-byte chunk. The lookups of the next tile run before
      // the wait for its stage, so the table's latency stays off the copies.
      const auto cache_row_of = [&](int tile) {
        const int key = key_lo + tile * C::kKeys + 32 * warp + lane;
        if (tile >= num_tiles || key < first_read || key > pos_max) return -1;
        const uint32_t b = p.block_div.div(static_cast<uint32_t>(key));
        const int32_t block = table[b];
        // Cache rows of kv_size elements: fewer than 2^31 of them (the host checks), so 32-bit arithmetic.
        return block < 0 ? -1
                         : (block * num_layers + layer) * 2 * block_size +
                               static_cast<int>(p.block_div.mod(static_cast<uint32_t>(key), b));
      };
      // Q rows (zero past the sequence's rows), once the consumers no longer read the last item's.
      const auto load_q = [&]() {
        if (served > 0) mbar_wait(q_empty, (served - 1) & 1);
#pragma unroll 4
        for (int r = row_in_pass; r < C::kRows; r += 8) {
          const int row = row0 + r;
          const bool valid = row < num_rows;
          const bf16* src =
              valid ? p.qkv + (seq_begin + row / group) * row_size + (kv_head * group + row % group) * D + chunk * 8
                    : p.qkv;
          cp_async_16(q_tile + wgmma::panel_offset<C::kRows>(r, chunk), src, valid);
        }
        cp_async_arrive_noinc(q_full);
      };
      if constexpr (!kFp8) {
        load_q();
        const bf16* head_cache = p.cache + kv_head * D + chunk * 8;
        int cache_row = cache_row_of(0);
        for (int it = 0; it < num_tiles; ++it, ++ring) {
          const int stage = ring % C::kStages;
          const int next_row = cache_row_of(it + 1);
          if (ring >= C::kStages) mbar_wait(empty_bar + 8 * stage, ((ring / C::kStages) - 1) & 1);
          const uint32_t k_tile = stages + stage * C::kStageBytes, v_tile = k_tile + C::kTileBytes;
#pragma unroll
          for (int i = 0; i < 16; ++i) {
            const int r = 2 * i + lane / 16;  // the warp's row
            const int src_row = __shfl_sync(0xffffffffu, cache_row, r);
            const bool valid = src_row >= 0;
            const bf16* src = valid ? head_cache + static_cast<int64_t>(src_row) * kv_size : p.cache;
            const uint32_t at = wgmma::panel_offset<C::kKeys>(32 * warp + r, chunk);
            cp_async_16(k_tile + at, src, valid);
            cp_async_16(v_tile + at, valid ? src + block_size * kv_size : src, valid);
          }
          cp_async_arrive_noinc(full_bar + 8 * stage);
          cache_row = next_row;
        }
      } else {
        // Warp w copies and signals keys [32 w, 32 w + 32) of a tile, so a warp waits for its own copies only;
        // thread t copies key t's K and V scales and turns the V scale into the widening's multiplier (in
        // place). Zeros for keys not to read.
        const int64_t hkv_block = p.num_heads_kv * block_size;
        const uint8_t* head_codes = p.cache8 + kv_head * D + (lane % 8) * 16;
        const uint32_t v_scales = code_buffer + C::kCodeBytes;
        // Scales [block, layer, K / V, head, offset]: a key's cache row is (block * layers + layer) 2 bs + offset,
        // its K scale at (row / bs * Hkv + head) bs + offset, its V scale Hkv bs further.
        const auto k_scale_at = [&](int row) {
          const uint32_t layer_kv = p.block_div.div(static_cast<uint32_t>(row));
          return (static_cast<int64_t>(layer_kv) * p.num_heads_kv + kv_head) * block_size +
                 static_cast<int>(p.block_div.mod(static_cast<uint32_t>(row), layer_kv));
        };
        // The warp's keys' codes (K: kv = 0, V: kv = 1) to `to`, key k's 16-byte chunk c at offset(k, c).
        const auto copy_codes = [&](int row, int kv, uint32_t to, auto offset) {
#pragma unroll
          for (int i = 0; i < 8; ++i) {
            const int r = 4 * i + lane / 8;  // the warp's row
            const int src_row = __shfl_sync(0xffffffffu, row, r);
            const bool row_valid = src_row >= 0;
            const uint8_t* src = row_valid ? head_codes + (static_cast<int64_t>(src_row) + kv * block_size) * kv_size
                                           : p.cache8;
            cp_async_16(to + offset(32 * warp + r, lane % 8), src, row_valid);
          }
        };
        // K: codes into the stage in the wgmma swizzle, scales beside it.
        const auto copy_k = [&](int row, uint32_t k_tile, uint32_t k_scale) {
          const bool valid = row >= 0;
          cp_async_4(k_scale + tid * 4, p.scales + (valid ? k_scale_at(row) : 0), valid);
          // The first panel of wgmma::panel_offset's layout: a key's 128 codes are one swizzled row.
          copy_codes(row, 0, k_tile,
                     [](int key, int c) { return static_cast<uint32_t>(key * 128 + ((c ^ (key % 8)) << 4)); });
        };
        // V: codes and scales into the code buffer.
        const auto stage_v = [&](int row) {
          const bool valid = row >= 0;
          cp_async_4(v_scales + tid * 4, p.scales + (valid ? k_scale_at(row) + hkv_block : 0), valid);
          copy_codes(row, 1, code_buffer, [](int key, int c) { return key * 128 + code_chunk_offset(key, c); });
        };
        // Each pass widens 4 rows of the warp's keys: lane l takes code chunk c = 4 ((l / 8) % 2) + l % 4 (16
        // codes: bf16 chunks 2c and 2c + 1, of panel c / 4) of row 2 (l / 16) + (l / 4) % 2. The 8 lanes of a
        // quarter warp thus hold two adjacent rows of one panel, whose swizzles differ in parity: each 16-byte
        // store covers all 8 bank groups once, and so does each code load (an odd row's halves swapped,
        // code_chunk_offset).
        const int pair_row = 2 * (lane / 16) + (lane / 4) % 2, c = 4 * ((lane / 8) % 2) + lane % 4;
        int cache_row = cache_row_of(0);
        stage_v(cache_row);  // the code buffer is free: the last item's tiles are widened
        load_q();
        for (int it = 0; it < num_tiles; ++it, ++ring) {
          const int stage = ring % C::kStages;
          const int next_row = cache_row_of(it + 1);
          asm volatile("cp.async.wait_all;" ::: "memory");
          sts32(v_scales + tid * 4, fp8_tile_multiplier(__uint_as_float(lds32(v_scales + tid * 4))));
          __syncwarp();  // the warp's V codes landed, its keys' multipliers are written
          if (ring >= C::kStages) mbar_wait(empty_bar + 8 * stage, ((ring / C::kStages) - 1) & 1);
          const uint32_t k_tile = stages + stage * C::kStageBytes, v_tile = k_tile + C::kKTileBytes;
          copy_k(cache_row, k_tile, k_scales + stage * C::kKeys * 4);
          cp_async_arrive_noinc(full_bar + 8 * stage);
#pragma unroll 4
          for (int i = 0; i < 8; ++i) {
            const int r = 32 * warp + 4 * i + pair_row;
            const uint4 codes = lds128(code_buffer + r * 128 + code_chunk_offset(r, c));
            const uint32_t multiplier = lds32(v_scales + r * 4);
            sts128(v_tile + wgmma::panel_offset<C::kKeys>(r, 2 * c), widen8_scaled(codes.x, codes.y, multiplier));
            sts128(v_tile + wgmma::panel_offset<C::kKeys>(r, 2 * c + 1), widen8_scaled(codes.z, codes.w, multiplier));
          }
          __syncwarp();  // every lane read the warp's codes before any lane copies the next tile's over them
          // The V tile was written by ordinary stores; the consumers' wgmma reads it through the async proxy.
          asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
          mbar_arrive(full_bar + 8 * stage);
          if (it + 1 < num_tiles) stage_v(next_row);
          cache_row = next_row;
        }
      }
      ++served;
    }
    asm volatile("cp.async.wait_all;" ::: "memory");  // nothing outstanding when the thread exits
    return;
  }

  // --- consumers ---
  wgmma::claim_registers<C::kConsumerRegisters>();
  const int consumer = warpgroup - 1;
  const int ctid = tid - 128 * warpgroup;  // thread in the warpgroup
  const int warp = ctid / 32, lane = ctid % 32;
  // This thread's rows of the tile: wg_row + lane / 4 (+ 8), wg_row = 64 consumer + 16 warp.
  const int wg_row = 64 * consumer + 16 * warp;
  // With FP8, the V tiles' values are 2^-kFp8Shift of the keys' (a power of two: the same outputs).
  constexpr float kOutScale = kFp8 ? 0x1p64f : 1.0f;
  static_assert(kFp8Shift == 64, "the output's power of two");
  // Q's descriptors: this warpgroup's 64 rows, k-step kk at dims 16 kk .. (panel kk / 4, 32 bytes per step);
  // with FP8, the rows' high and low parts, k-step kk at dims 32 kk .. (32 bytes per step).
  const uint32_t q_rows = q_tile + 64 * consumer * 128;
  const uint32_t q_hi = q_split + 64 * consumer * 128, q_lo = q_hi + C::kRows * 128;
  int ring = 0, served = 0;
  for (int round = 0;; ++round) {
    const int item = item_of(round);
    if (item < 0) break;
    PrefillItem work;
    PrefillRowTile rt;
    if (!item_tile(item, work, rt)) continue;
    const int kv_head = work.kv_head;
    const int seq_begin = rt.seq_begin, num_rows = rt.num_rows, row0 = rt.row0;
    const int tok_first = rt.tok_first, pos_first = rt.pos_first, pos_max = rt.pos_max;
    const PrefillTiles tiles = prefill_tiles(pos_first, pos_max, window, C::kKeys);
    const int key_lo = tiles.key_lo, num_tiles = tiles.num_tiles;

    float o[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    mbar_wait(q_full, served & 1);
    // The softmax's scale of the thread's two rows (with FP8, times the row's power of two back).
    float row_scale_log2[2] = {pp.scale_log2, pp.scale_log2};
    if constexpr (kFp8) {
      // Thread t splits row 64 consumer + t / 2's half t % 2 (64 dims: bf16 chunks 8 (t % 2) ..) into q_hi and
      // q_lo (split_e4m3x2), with the power of two that takes the row's largest magnitude into (224, 448].
      const int r = 64 * consumer + ctid / 2, half = ctid % 2;
      float amax = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const uint4 w = lds128(q_tile + wgmma::panel_offset<C::kRows>(r, 8 * half + j));
        for (const uint32_t x : {w.x, w.y, w.z, w.w}) {
          amax = fmaxf(amax, fmaxf(fabsf(__uint_as_float(x << 16)), fabsf(__uint_as_float(x & 0xFFFF0000u))));
        }
      }
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
      int power = 0;  // amax * 2^power in (224, 448] (0 for a zero row; within +-120, so both are normal)
      if (amax > 0.0f) {
        const uint32_t bits = __float_as_uint(amax);
        power = min(max(((bits & 0x7FFFFFu) > 0x600000u ? 7 : 8) - (static_cast<int>(bits >> 23) - 127), -120), 120);
      }
      const float up = __uint_as_float(static_cast<uint32_t>(power + 127) << 23);
      if (half == 0) sts32(row_scales + r * 4, static_cast<uint32_t>(127 - power) << 23);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        // FP8 chunk 4 half + j: dims 16 (4 half + j) .., the bf16 chunks 8 half + 2 j and the next.
        const uint4 w0 = lds128(q_tile + wgmma::panel_offset<C::kRows>(r, 8 * half + 2 * j));
        const uint4 w1 = lds128(q_tile + wgmma::panel_offset<C::kRows>(r, 8 * half + 2 * j + 1));
        const uint32_t words[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
        uint32_t hi[4], lo[4];
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          uint32_t h0, l0, h1, l1;
          split_e4m3x2(words[2 * m], up, h0, l0);
          split_e4m3x2(words[2 * m + 1], up, h1, l1);
          hi[m] = h0 | (h1 << 16), lo[m] = l0 | (l1 << 16);
        }
        const uint32_t at = r * 128 + (((4 * half + j) ^ (r % 8)) << 4);
        sts128(q_split + at, make_uint4(hi[0], hi[1], hi[2], hi[3]));
        sts128(q_split + C::kRows * 128 + at, make_uint4(lo[0], lo[1], lo[2], lo[3]));
      }
      // The parts were written by ordinary stores, for the warpgroup's wgmma (the async proxy).
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      asm volatile("bar.sync %0, 128;" ::"r"(1 + consumer) : "memory");
      if (lane == 0) mbar_arrive(q_empty);  // the item's Q tile is read
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        row_scale_log2[h] *= __uint_as_float(lds32(row_scales + (wg_row + lane / 4 + 8 * h) * 4));
      }
    }

    for (int it = 0; it < num_tiles; ++it, ++ring) {
      const int stage = ring % C::kStages;
      mbar_wait(full_bar + 8 * stage, (ring / C::kStages) & 1);
      const uint32_t k_tile = stages + stage * C::kStageBytes, v_tile = k_tile + C::kKTileBytes;
      const int k0 = key_lo + it * C::kKeys;

      // S = Q K^T over the 128 dims.
      float s[64];
      wgmma::fence();
      if constexpr (kFp8) {
        // The high parts' products, then the low parts' added: 4 k-steps of 32 dims each.
#pragma unroll
        for (int kk = 0; kk < 2 * D / 32; ++kk) {
          const uint64_t a = wgmma::desc_sw128((kk < 4 ? q_hi : q_lo) + (kk % 4) * 32, 16, 1024);
          const uint64_t b = wgmma::desc_sw128(k_tile + (kk % 4) * 32, 16, 1024);
          wgmma::m64k32_e4m3<128>(s, a, b, kk > 0);
        }
      } else {
        // The bases made opaque (wgmma::opaque): with the registers this frees, the bf16 kernel ran 1-2% faster
        // on an H100 (the FP8 kernel did not: it keeps its descriptors hoisted).
        const uint32_t q_base = wgmma::opaque(q_rows), k_base = wgmma::opaque(k_tile);
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          const uint32_t panel = kk / 4, step = (kk % 4) * 32;
          const uint64_t a = wgmma::desc_sw128(q_base + panel * C::kRows * 128 + step, 16, 1024);
          const uint64_t b = wgmma::desc_sw128(k_base + panel * C::kKeys * 128 + step, 16, 1024);
          wgmma::m64n128k16_ss(s, a, b, kk > 0);
        }
      }
      wgmma::commit_group();
      wgmma::wait_group<0>();
      wgmma::hold(s);
      if (!kFp8 && it == num_tiles - 1) {
        __syncwarp();
        if (lane == 0) mbar_arrive(q_empty);  // the item's last product with Q is done
      }
      if constexpr (kFp8) scale_by_keys(s, k_scales + stage * C::kKeys * 4, lane);

      // Mask only tiles that some row does not see whole: past the first row's position, or before the last
      // row's window start.
      const bool boundary = prefill_needs_mask(k0, C::kKeys, pos_first, pos_max, window);
      if (boundary) {
        const int key_base = k0 + 2 * (lane % 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // Padding rows past the sequence get position -1: every key masked.
          const int row = row0 + wg_row + lane / 4 + 8 * h;
          const int pos = row < num_rows ? pos_first + row / group - tok_first : -1;
          const int first_key = window_first_key(pos, window);
#pragma unroll
          for (int j = 0; j < C::kKeys / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int key = key_base + 8 * j + e;
              if (key > pos || key < first_key) s[4 * j + 2 * h + e] = -INFINITY;
            }
          }
        }
      }

      // Online softmax in base 2; the 4 lanes of a quad share a row.
      float corrections[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = row_max[h];
#pragma unroll
        for (int j = 0; j < C::kKeys / 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        // A row with no visible key yet keeps max -inf; subtract 0 then so exp gives 0, not NaN.
        // Unfused products: when the maximum did not change, the correction is exactly 1 (a wholly masked tile
        // leaves a row's state exactly as it was).
        const float scale_log2 = row_scale_log2[h];
        const float base_exp = mx == -INFINITY ? 0.0f : __fmul_rn(mx, scale_log2);
        const float correction = ex2(__fmul_rn(row_max[h], scale_log2) - base_exp);
        row_max[h] = mx;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < C::kKeys / 8; ++j) {
          s[4 * j + 2 * h] = ex2(fmaf(s[4 * j + 2 * h], scale_log2, -base_exp));
          s[4 * j + 2 * h + 1] = ex2(fmaf(s[4 * j + 2 * h + 1], scale_log2, -base_exp));
          sum += s[4 * j + 2 * h] + s[4 * j + 2 * h + 1];
        }
        row_sum[h] = row_sum[h] * correction + sum;
        corrections[h] = correction;
      }
      // A row whose maximum stayed has correction exactly 1: a warp none of whose rows' maxima moved skips the
      // rescaling (most tiles of a long row, past its first few), with the same result.
      if (__any_sync(0xffffffffu, corrections[0] != 1.0f || corrections[1] != 1.0f)) {
#pragma unroll
        for (int j = 0; j < D / 8; ++j) {
          o[4 * j] *= corrections[0];
          o[4 * j + 1] *= corrections[0];
          o[4 * j + 2] *= corrections[1];
          o[4 * j + 3] *= corrections[1];
        }
      }

      // O += P V: keys 16 kk .. 16 kk + 15 are S columns 16 kk + 2 (lane % 4) (+ 1, + 8, + 9), the A fragment.
      uint32_t pa[C::kKeys / 16][4];
#pragma unroll
      for (int kk = 0; kk < C::kKeys / 16; ++kk) {
        pa[kk][0] = pack_bf16(s[8 * kk], s[8 * kk + 1]);
        pa[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
        pa[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
        pa[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
      }
      wgmma::fence();
      const uint32_t v_base = kFp8 ? v_tile : wgmma::opaque(v_tile);
#pragma unroll
      for (int kk = 0; kk < C::kKeys / 16; ++kk) {
        // Keys 16 kk ..: two 8-key groups (sbo 1024), the two 64-dim panels (lbo one panel).
        const uint64_t b = wgmma::desc_sw128(v_base + kk * 16 * 128, C::kKeys * 128, 1024);
        wgmma::m64n128k16_rs_tb(o, pa[kk], b);
      }
      wgmma::commit_group();
      wgmma::wait_group<0>();
      wgmma::hold(o);
#pragma unroll
      for (int kk = 0; kk < C::kKeys / 16; ++kk) wgmma::hold(pa[kk]);
      __syncwarp();
      if (lane == 0) mbar_arrive(empty_bar + 8 * stage);
    }

    store_rows(p, o, row_sum, kOutScale, row0 + wg_row + lane / 4, num_rows, seq_begin, group, kv_head, lane);
    ++served;
  }
}

template <bool kFp8>
void launch(const PagedAttentionParams& p, int64_t max_seq_tokens, cudaStream_t stream) {
  using C = WgmmaPrefillConfig<kFp8>;
  static const bool configured = (configure_smem(wgmma_prefill_kernel<kFp8>, C::kSmemBytes), true);
  (void)configured;
  static const int num_sms = [] {
    int device = 0, sms = 0;
    TIDE_CUDA_CHECK(cudaGetDevice(&device));
    TIDE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return sms;
  }();
  const int group = static_cast<int>(p.num_heads / p.num_heads_kv);
  const int64_t tiles = (max_seq_tokens * group + C::kRows - 1) / C::kRows;  // row tiles, from the end (prefill_tiling.h)
  const PrefillParams pp{p, static_cast<int>(tiles), group, p.scale * kLog2e};
  const int64_t items = p.num_seqs * tiles * p.num_heads_kv;
  TIDE_CHECK(items < (int64_t{1} << 31));
  const int64_t ctas = std::min<int64_t>(items, num_sms);
  launch_kernel(wgmma_prefill_kernel<kFp8>, dim3(static_cast<unsigned>(ctas)), C::kThreads, C::kSmemBytes,
                stream, pp);
}

}  // namespace

void launch_wgmma_prefill(const PagedAttentionParams& p, int64_t max_seq_tokens, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  if (p.cache8 != nullptr) {
    launch<true>(p, max_seq_tokens, stream);
  } else {
    launch<false>(p, max_seq_tokens, stream);
  }
}

}  // namespace tide::cuda::mma
