// The sample op on the GPU (backend.h gives the semantics; CpuBackend::sample is the reference). One CTA of
// 512 threads per row: bias and penalties on the row's few listed tokens, then the argmax (greedy rows stop
// there), then thresholds by radix selection over the ordered bits of the logits (three histogram passes
// of 11, 11 and 10 bits: counts for top-k, fixed-point probability mass for top-p, no sort), then the total
// kept weight and an inverse-CDF draw by a block-wide prefix scan in vocabulary order that stops at the
// chosen token. Weights and their sums are exact integers (sampling_math.h), so the result does not depend
// on the order of atomics: the same ids as the CPU reference, run after run. A row that checks a drafted token
// (speculative sampling, Backend::sample_with_drafts) also keeps the draft's logits row under the draft's
// parameters, accepts or refuses the draft, and on a refusal draws from the residual in 128-bit integers by the
// same ordered scan.
// Non-goals for now: several CTAs per row (one row is ~10 passes over V floats from one SM, mostly from L2).
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/row_loop.cuh"
#include "backend/sampling_math.h"

namespace tide::cuda {
namespace {

using namespace tide::sampling;

constexpr int kThreads = 512;  // 1024 would cap registers at 64 and spill
constexpr int kBins = 2048;    // the widest digit: 11 bits
constexpr int kBinsPerThread = kBins / kThreads;
constexpr int kLevels = 3;     // digits of the 32-bit key, most significant first
constexpr int kScanItems = 16; // consecutive logits per thread in a tile of the draw's scan
constexpr int kResidualItems = 4;  // the same for the residual's 128-bit weights (registers)
__device__ constexpr int kShift[kLevels] = {21, 10, 0};
__device__ constexpr uint32_t kDigitMask[kLevels] = {0x7FF, 0x7FF, 0x3FF};

using u128 = unsigned __int128;
using BlockScan = cub::BlockScan<uint64_t, kThreads>;
using BlockReduce = cub::BlockReduce<uint64_t, kThreads>;
using BlockScan128 = cub::BlockScan<u128, kThreads>;
using BlockReduce128 = cub::BlockReduce<u128, kThreads>;

struct MaxOp {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a > b ? a : b; }
};

struct Shared {
  union {
    BlockScan::TempStorage scan;
    BlockReduce::TempStorage reduce;
    BlockScan128::TempStorage scan128;
    BlockReduce128::TempStorage reduce128;
  } cub;
  // A 64-bit count or mass per bin, kept as two 32-bit words: 32-bit shared atomics are native, 64-bit
  // ones are not (hist_add).
  uint32_t hist_lo[kBins];
  uint32_t hist_hi[kBins];
  u128 value;  // a block-wide result being broadcast
  int32_t bin;
  int32_t found;
};

// The four logits [base, base + 4) of the row; -inf past the end (weight 0, never kept by the draw).
__device__ __forceinline__ void load4(const float* row, int64_t vocab, int64_t base, float* v) {
  if ((vocab & 3) == 0 && base + 4 <= vocab) {
    const float4 q = *reinterpret_cast<const float4*>(row + base);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    return;
  }
  for (int j = 0; j < 4; ++j) v[j] = base + j < vocab ? row[base + j] : -INFINITY;
}

// (key << 32) | ~id of the largest key, lowest id among equals.
__device__ uint64_t block_argmax(const float* row, int64_t vocab, Shared& sh) {
  uint64_t best = 0;
  for_each_logit<kThreads>(row, vocab, [&](int64_t i, float x) {
    const uint64_t packed = (uint64_t{order_key(x)} << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
    best = packed > best ? packed : best;
  });
  const uint64_t r = BlockReduce(sh.cub.reduce).Reduce(best, MaxOp());
  if (threadIdx.x == 0) sh.value = r;
  __syncthreads();
  const auto result = static_cast<uint64_t>(sh.value);
  __syncthreads();  // every thread has read sh.value before it is written again
  return result;
}

// sh.hist[bin] += w, exactly: the low words wrap, and every add that wraps the low word carries one into
// the high word, so the pair holds the sum whatever the order of the adds.
__device__ __forceinline__ void hist_add(Shared& sh, uint32_t bin, uint64_t w) {
  const uint32_t lo = static_cast<uint32_t>(w), hi = static_cast<uint32_t>(w >> 32);
  const uint32_t old = atomicAdd(&sh.hist_lo[bin], lo);
  const uint32_t carry = old + lo < old ? 1u : 0u;
  if (hi + carry != 0) atomicAdd(&sh.hist_hi[bin], hi + carry);
}

__device__ __forceinline__ uint64_t hist_get(const Shared& sh, int bin) {
  return (uint64_t{sh.hist_hi[bin]} << 32) | sh.hist_lo[bin];
}

// Scanning sh.hist from the highest bin down, the bin at which the running total first reaches `need`
// (1 <= need <= total; for top-p, need == 0 asks for ceil(top_p * total) of the total this level sees).
// Subtracts the bins above from `need`.
__device__ int select_bin(Shared& sh, uint64_t& need, float top_p) {
  __syncthreads();  // the histogram is complete
  const int t = threadIdx.x;
  uint64_t items[kBinsPerThread], above[kBinsPerThread], total = 0;
  for (int j = 0; j < kBinsPerThread; ++j) items[j] = hist_get(sh, kBins - 1 - (kBinsPerThread * t + j));
  BlockScan(sh.cub.scan).ExclusiveSum(items, above, total);
  const uint64_t want = need == 0 ? top_p_need(top_p, total) : need;
  for (int j = 0; j < kBinsPerThread; ++j) {
    if (above[j] < want && above[j] + items[j] >= want) {
      sh.bin = kBins - 1 - (kBinsPerThread * t + j);
      sh.value = above[j];
    }
  }
  __syncthreads();
  need = want - static_cast<uint64_t>(sh.value);
  const int bin = sh.bin;
  __syncthreads();  // everyone has read sh.bin and sh.value before they are written again
  return bin;
}

// The largest key t among keys >= min_key such that the count (kMass false) or weight (kMass true) of the
// keys >= t reaches `need` (top-p: need 0, see select_bin).
template <bool kMass>
__device__ uint32_t radix_select(const float* row, int64_t vocab, uint32_t min_key, uint64_t need, float top_p,
                                 float max_logit, float inv_temperature, Shared& sh) {
  uint32_t prefix = 0, prefix_mask = 0;
  for (int level = 0; level < kLevels; ++level) {
    for (int b = threadIdx.x; b < kBins; b += kThreads) sh.hist_lo[b] = sh.hist_hi[b] = 0;
    __syncthreads();
    const int shift = kShift[level];
    const uint32_t digit_mask = kDigitMask[level];
    for_each_logit<kThreads>(row, vocab, [&](int64_t, float x) {
      const uint32_t key = order_key(x);
      if (key < min_key || (key & prefix_mask) != prefix) return;
      const uint32_t digit = (key >> shift) & digit_mask;
      if constexpr (kMass) {
        const uint64_t w = weight_of(relative_prob(x, max_logit, inv_temperature));
        if (w != 0) hist_add(sh, digit, w);
      } else {
        atomicAdd(&sh.hist_lo[digit], 1u);  // counts stay below 2^32
      }
    });
    const int bin = select_bin(sh, need, top_p);
    prefix |= static_cast<uint32_t>(bin) << shift;
    prefix_mask |= digit_mask << shift;
  }
  return prefix;
}

// The kept weights of one row under its parameters (steps 2 .. 5): a point mass on the argmax for a greedy row or
// one whose every logit is -inf (which has no distribution to draw from, and -inf - -inf would be NaN), else
// weight_of(relative probability) for the keys at or above the top-k / top-p threshold that pass min-p.
struct Kept {
  int32_t best_id = 0;
  bool point = true;
  uint32_t threshold = 0;
  float max_logit = 0.0f, inv_temperature = 0.0f, min_p = 0.0f;

  __device__ uint64_t weight(int64_t i, float x) const {
    if (point) return i == best_id ? 1 : 0;
    if (order_key(x) < threshold) return 0;
    const float prob = relative_prob(x, max_logit, inv_temperature);
    if (min_p > 0.0f && !(prob >= min_p)) return 0;
    return weight_of(prob);
  }
};

__device__ Kept keep(const float* row, int64_t vocab, const SamplingRow& s, Shared& sh) {
  Kept k;
  // 2. Greedy.
  const uint64_t best = block_argmax(row, vocab, sh);
  k.best_id = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(best));
  k.max_logit = key_float(static_cast<uint32_t>(best >> 32));
  if (s.temperature == 0.0f || k.max_logit == -INFINITY) return k;
  k.point = false;
  k.inv_temperature = 1.0f / s.temperature;
  k.min_p = s.min_p;
  // 3, 4. Top-k, then top-p over what top-k keeps.
  if (s.top_k > 0 && s.top_k < vocab) {
    k.threshold = radix_select<false>(row, vocab, 0, static_cast<uint64_t>(s.top_k), 1.0f, k.max_logit,
                                      k.inv_temperature, sh);
  }
  if (s.top_p < 1.0f) {
    k.threshold = radix_select<true>(row, vocab, k.threshold, 0, s.top_p, k.max_logit, k.inv_temperature, sh);
  }
  return k;
}

// 5. The sum of the row's kept weights (min-p applied).
__device__ uint64_t kept_total(const float* row, int64_t vocab, const Kept& k, Shared& sh) {
  if (k.point) return 1;
  uint64_t partial = 0;
  for_each_logit<kThreads>(row, vocab, [&](int64_t i, float x) { partial += k.weight(i, x); });
  const uint64_t sum = BlockReduce(sh.cub.reduce).Sum(partial);
  if (threadIdx.x == 0) sh.value = sum;
  __syncthreads();
  const auto total = static_cast<uint64_t>(sh.value);
  __syncthreads();
  return total;
}

// 6. Inverse CDF in vocabulary order: the first id at which the running sum of the weights exceeds `target`
// (< their total), or -1. Tiles of kItems consecutive ids per thread (tile_weights(first, w) gives the weights
// of first .. first + kItems - 1, 0 past the end), a block scan per tile, stopping at the tile that holds it.
template <typename W, int kItems, typename Scan, typename TileWeights>
__device__ int32_t draw_in_order(int64_t vocab, W target, typename Scan::TempStorage& storage,
                                 TileWeights&& tile_weights, Shared& sh) {
  if (threadIdx.x == 0) sh.found = -1;
  __syncthreads();
  W running = 0;
  for (int64_t base = 0; base < vocab; base += kItems * kThreads) {
    const int64_t first = base + kItems * threadIdx.x;
    W w[kItems];
    tile_weights(first, w);
    W mine = 0;
    for (int j = 0; j < kItems; ++j) mine += w[j];
    W before = 0, tile = 0;
    Scan(storage).ExclusiveSum(mine, before, tile);
    W cumulative = running + before;
    if (cumulative <= target && target < cumulative + mine) {
      for (int j = 0; j < kItems; ++j) {
        cumulative += w[j];
        if (cumulative > target) {
          sh.found = static_cast<int32_t>(first + j);
          break;
        }
      }
    }
    __syncthreads();
    if (sh.found >= 0) break;
    running += tile;
  }
  return sh.found;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const __grid_constant__ SampleParams p) {
  begin_dependent_kernel();
  __shared__ Shared sh;
  const int64_t r = blockIdx.x;
  const int64_t vocab = p.vocab;
  float* row = p.logits + r * vocab;
  const SamplingRow s = p.rows[r];

  // -1. The row's allowed-token mask: the disallowed logits set to -inf, four consecutive logits per thread at a
  // time so that a warp's writes are coalesced (a mask usually allows few tokens: most of the row is written).
  // The threads that write a token here are not those that bias it below: a barrier between.
  const int32_t m = p.mask_index != nullptr ? p.mask_index[r] : -1;
  if (m >= 0) {
    const uint32_t* mask = p.masks + m * ((vocab + 31) / 32);
    const bool aligned = (vocab & 3) == 0;
    for (int64_t base = 4 * static_cast<int64_t>(threadIdx.x); base < vocab; base += 4 * kThreads) {
      const uint32_t bits = (mask[base >> 5] >> (base & 31)) & 0xFu;  // the 4 tokens' bits (base % 4 == 0)
      if (bits == 0xFu) continue;
      if (bits == 0 && aligned) {
        *reinterpret_cast<float4*>(row + base) = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
        continue;
      }
      for (int j = 0; j < 4 && base + j < vocab; ++j) {
        if (((bits >> j) & 1u) == 0) row[base + j] = -INFINITY;
      }
    }
    __syncthreads();
  }

  // 0, 1. Bias, then penalties: ids are distinct within a row, so each thread owns the tokens it updates.
  if (p.history_starts != nullptr) {
    for (int32_t h = p.history_starts[r] + static_cast<int32_t>(threadIdx.x); h < p.history_starts[r + 1]; h += kThreads) {
      const HistoryToken t = p.history[h];
      row[t.id] = adjusted_logit(row[t.id], t, s);
    }
    __syncthreads();
  }

  // 2 .. 5.
  const Kept kp = keep(row, vocab, s, sh);
  const int32_t j = p.draft_index != nullptr ? p.draft_index[r] : -1;
  if (j < 0) {
    if (kp.point) {
      if (threadIdx.x == 0) p.out_ids[r] = kp.best_id;
      return;
    }
    const uint64_t target = scale_to(random_bits(s.seed, s.counter), kept_total(row, vocab, kp, sh));
    const int32_t found = draw_in_order<uint64_t, kScanItems, BlockScan>(
        vocab, target, sh.cub.scan,
        [&](int64_t first, uint64_t (&w)[kScanItems]) {
          float v[kScanItems];
          for (int q = 0; q < kScanItems / 4; ++q) load4(row, vocab, first + 4 * q, v + 4 * q);
          for (int q = 0; q < kScanItems; ++q) w[q] = kp.weight(first + q, v[q]);
        },
        sh);
    if (threadIdx.x == 0) p.out_ids[r] = found >= 0 ? found : kp.best_id;  // the most likely has weight 2^40
    return;
  }

  // A drafted token d drawn from q, the draft's row j under its parameters: accepted with probability
  // min(1, (p[d] / P) / (q[d] / Q)), else a draw from the residual max(0, p * Q - q * P).
  const float* q_row = p.draft_logits + j * vocab;
  const SamplingRow qs = p.draft_rows[j];
  const int32_t d = p.draft_ids[j];
  const uint64_t p_total = kept_total(row, vocab, kp, sh);
  const Kept kq = keep(q_row, vocab, qs, sh);
  const uint64_t q_total = kept_total(q_row, vocab, kq, sh);
  if (accept_draft(kp.weight(d, row[d]), p_total, kq.weight(d, q_row[d]), q_total, random_bits(qs.seed, qs.counter))) {
    if (threadIdx.x == 0) p.out_ids[r] = d;
    return;
  }
  auto residual_at = [&](int64_t i) -> u128 {
    if (i >= vocab) return 0;
    return residual_weight(kp.weight(i, row[i]), p_total, kq.weight(i, q_row[i]), q_total);
  };
  u128 partial = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) partial += residual_at(i);
  const u128 sum = BlockReduce128(sh.cub.reduce128).Sum(partial);
  if (threadIdx.x == 0) sh.value = sum;
  __syncthreads();
  const u128 residual = sh.value;
  __syncthreads();
  if (residual == 0) {
    if (threadIdx.x == 0) p.out_ids[r] = d;
    return;
  }
  const u128 target = scale_to_128(random_bits(s.seed, s.counter), residual);
  const int32_t found = draw_in_order<u128, kResidualItems, BlockScan128>(
      vocab, target, sh.cub.scan128,
      [&](int64_t first, u128 (&w)[kResidualItems]) {
        for (int q = 0; q < kResidualItems; ++q) w[q] = residual_at(first + q);
      },
      sh);
  if (threadIdx.x == 0) p.out_ids[r] = found >= 0 ? found : d;  // found: the target is below the residual's sum
}

}  // namespace

void launch_sample(const SampleParams& p, cudaStream_t stream) {
  if (p.num_rows > 0) launch_kernel(sample_kernel, static_cast<unsigned>(p.num_rows), kThreads, 0, stream, p);
}

}  // namespace tide::cuda
