// The logprobs op on the GPU (backend.h gives the contract; CpuBackend::logprobs is the reference). One CTA
// of 512 threads per row and one pass over its logits: each thread keeps an online max and sum of
// exponentials (the sum in f64) and, in registers, a descending list of its own best tokens. The block then
// merges the (max, sum) pairs into log(sum exp), and n rounds of a block-wide argmax, each over every
// thread's best key below the previous winner, give the top n in order without sorting the row.
// Tokens are compared as (order key desc, id asc) packed in 64 bits, so ties resolve as on the CPU.
// Non-goals for now: several CTAs per row (one row is one read of V floats from one SM).
#include <cub/block/block_reduce.cuh>

#include <cmath>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/row_loop.cuh"
#include "backend/sampling_math.h"

namespace tide::cuda {
namespace {

using namespace tide::sampling;

constexpr int kThreads = 512;

struct MaxFloat {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct MaxPacked {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a > b ? a : b; }
};

struct Shared {
  union {
    cub::BlockReduce<float, kThreads>::TempStorage max;
    cub::BlockReduce<double, kThreads>::TempStorage sum;
    cub::BlockReduce<uint64_t, kThreads>::TempStorage top;
  } cub;
  float max_logit;
  double log_sum_exp;
  uint64_t winner;
};

// (order key << 32) | ~id: larger for a larger logit, and for the lower id among equal logits. Every real
// token packs above 0, which marks an empty slot.
__device__ __forceinline__ uint64_t pack(float x, int64_t i) {
  return (uint64_t{order_key(x)} << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
}

__device__ __forceinline__ float logprob(float x, double log_sum_exp) {
  return static_cast<float>(static_cast<double>(x) - log_sum_exp);
}

// A thread's n best tokens as packed keys, in registers: every index is a constant once the loops unroll (an
// index depending on n would put the array in local memory). Sorted descending, the list fills the last n
// slots; the slots before them hold kTaken, above every key, so that key[kLogprobsSlots - 1] is the n-th
// best and only a larger key enters.
constexpr uint64_t kTaken = ~uint64_t{0};  // no token packs to it: the key of +inf is below 0xFFFFFFFF

struct TopList {
  uint64_t key[kLogprobsSlots];

  __device__ __forceinline__ explicit TopList(int n) {
#pragma unroll
    for (int j = 0; j < kLogprobsSlots; ++j) key[j] = j < kLogprobsSlots - n ? kTaken : 0;
  }
  __device__ __forceinline__ void offer(uint64_t k) {
    if (k <= key[kLogprobsSlots - 1]) return;
#pragma unroll
    for (int j = 0; j < kLogprobsSlots; ++j) {  // insertion: the carried key swaps past smaller ones
      const uint64_t here = key[j];
      const bool above = k > here;
      key[j] = above ? k : here;
      k = above ? here : k;
    }
  }
  // The largest key below `bound` (0 if none): the best token not yet taken, when every larger one was.
  __device__ __forceinline__ uint64_t best_below(uint64_t bound) const {
    uint64_t best = 0;
#pragma unroll
    for (int j = 0; j < kLogprobsSlots; ++j) best = key[j] < bound && key[j] > best ? key[j] : best;
    return best;
  }
};

__global__ void __launch_bounds__(kThreads) logprobs_kernel(const __grid_constant__ LogprobsParams p) {
  begin_dependent_kernel();
  __shared__ Shared sh;
  const int64_t r = blockIdx.x;
  const int64_t vocab = p.vocab;
  const int n = p.n;
  const float* row = p.logits + r * vocab;

  // One pass: online max and sum of exp(x - max), and the thread's best tokens.
  float m = -INFINITY;
  double s = 0;
  TopList top(n);
  for_each_logit<kThreads>(row, vocab, [&](int64_t i, float x) {
    if (x > m) {
      // Rescale in f64: a rising row rescales often, and an f32 factor would add its rounding each time.
      s = s * exp(static_cast<double>(m) - static_cast<double>(x)) + 1.0;  // m = -inf: s was 0
      m = x;
    } else if (x != -INFINITY) {
      s += static_cast<double>(expf(x - m));
    }
    top.offer(pack(x, i));
  });

  // log(sum exp) of the row; NaN when every logit is -inf (no distribution).
  const float block_max = cub::BlockReduce<float, kThreads>(sh.cub.max).Reduce(m, MaxFloat());
  if (threadIdx.x == 0) sh.max_logit = block_max;
  __syncthreads();
  const float max_logit = sh.max_logit;
  const double mine = m == -INFINITY ? 0.0 : s * exp(static_cast<double>(m) - static_cast<double>(max_logit));
  const double sum = cub::BlockReduce<double, kThreads>(sh.cub.sum).Sum(mine);
  if (threadIdx.x == 0) sh.log_sum_exp = max_logit == -INFINITY ? NAN : static_cast<double>(max_logit) + log(sum);
  __syncthreads();
  const double log_sum_exp = sh.log_sum_exp;
  float* values = p.out_values + r * (1 + n);

  if (threadIdx.x == 0) {
    const int32_t chosen = p.chosen_ids[r];
    values[0] = chosen >= 0 && chosen < vocab ? logprob(row[chosen], log_sum_exp) : NAN;  // never read outside
  }

  // The top n: n rounds of a block-wide argmax over each thread's best key below the previous round's winner
  // (every key above it has won already). Keys are distinct, so the order is total.
  uint64_t last = kTaken;
  for (int j = 0; j < n; ++j) {
    last = cub::BlockReduce<uint64_t, kThreads>(sh.cub.top).Reduce(top.best_below(last), MaxPacked());
    if (threadIdx.x == 0) {
      sh.winner = last;
      p.out_ids[r * n + j] = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(last));
      values[1 + j] = logprob(key_float(static_cast<uint32_t>(last >> 32)), log_sum_exp);
    }
    __syncthreads();
    last = sh.winner;  // Reduce's result is valid in thread 0 only
    __syncthreads();   // read before the next round writes it
  }
}

}  // namespace

void launch_logprobs(const LogprobsParams& p, cudaStream_t stream) {
  if (p.num_rows > 0) launch_kernel(logprobs_kernel, static_cast<unsigned>(p.num_rows), kThreads, 0, stream, p);
}

}  // namespace tide::cuda
