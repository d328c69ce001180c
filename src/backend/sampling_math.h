// The arithmetic of the sample op (backend.h, "sampling") shared by the CPU reference and the CUDA kernels,
// so both compute bit-identical values: the Philox4x32-10 counter-based generator, order-preserving keys of
// f32 logits, the penalties, and the fixed-point weight of a token. Every float operation here is a single
// IEEE-rounded add, multiply or divide (on the GPU through __fadd_rn / __fmul_rn, which nvcc never contracts
// into an FMA; the host build is ISO C++, where GCC does not contract either), so the same inputs give the
// same bits on both backends. Plain C++17: the CUDA files include it.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace tide {

// Sampling parameters of one row of the sample op (backend.h documents the semantics).
struct SamplingRow {
  float temperature = 0.0f;         // 0: greedy (argmax after penalties; the filters are not applied)
  int32_t top_k = 0;                // 0 or >= vocabulary: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off
  float presence_penalty = 0.0f;    // 0: off
  float frequency_penalty = 0.0f;   // 0: off
  uint64_t seed = 0;                // the sequence's random stream
  uint64_t counter = 0;             // the sequence's draw index (how many tokens it has sampled before)
};

// A distinct token of a row's history with how often it occurs in the prompt and in the output so far, and
// the bias the request gives it: an entry may carry counts, a bias, or both.
struct HistoryToken {
  int32_t id = 0;
  int32_t prompt_count = 0;
  int32_t output_count = 0;
  float bias = 0.0f;  // added to the logit before the penalties (OpenAI logit_bias); -inf bans the token
};

}  // namespace tide

namespace tide::sampling {

// --- rounded float operations (never fused) ---

TIDE_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
TIDE_HD float sub_rn(float a, float b) { return add_rn(a, -b); }
TIDE_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
// Round to the nearest integer, ties to even (|x| < 2^22).
TIDE_HD float round_even(float x) {
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it leaves no fraction bits
  return sub_rn(add_rn(x, magic), magic);
}

// --- Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) ---

TIDE_HD void philox_round(uint32_t (&ctr)[4], const uint32_t (&key)[2]) {
  const uint64_t p0 = uint64_t{0xD2511F53u} * ctr[0];
  const uint64_t p1 = uint64_t{0xCD9E8D57u} * ctr[2];
  const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  ctr[0] = hi1 ^ ctr[1] ^ key[0];
  ctr[1] = lo1;
  ctr[2] = hi0 ^ ctr[3] ^ key[1];
  ctr[3] = lo0;
}

// Philox4x32-10 of the 128-bit counter `ctr` (replaced by the output) under the key (key0, key1).
TIDE_HD void philox4x32_10(uint32_t (&ctr)[4], uint32_t key0, uint32_t key1) {
  uint32_t key[2] = {key0, key1};
  for (int i = 0; i < 10; ++i) {
    if (i > 0) {
      key[0] += 0x9E3779B9u;
      key[1] += 0xBB67AE85u;
    }
    philox_round(ctr, key);
  }
}

// 64 random bits of draw `counter` of the stream `seed`: the first two words of the Philox block of the
// counter (counter lo, counter hi, 0, 0) under the key (seed lo, seed hi).
TIDE_HD uint64_t random_bits(uint64_t seed, uint64_t counter) {
  uint32_t out[4] = {static_cast<uint32_t>(counter), static_cast<uint32_t>(counter >> 32), 0, 0};
  philox4x32_10(out, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return uint64_t{out[0]} | (uint64_t{out[1]} << 32);
}

// floor(bits * total / 2^64): a uniform integer in [0, total) (total > 0), exact.
TIDE_HD uint64_t scale_to(uint64_t bits, uint64_t total) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(bits, total);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * total) >> 64);
#endif
}

// --- keys: f32 logits as unsigned integers in the same order (-0 sorts just below +0; no NaNs) ---

TIDE_HD uint32_t order_key(float x) {
  const uint32_t u = bits_of(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
TIDE_HD float key_float(uint32_t key) { return float_of((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key); }

// --- penalties ---

// The logit of a token seen `prompt_count` times in the prompt and `output_count` times in the output:
// repetition penalty as transformers (l / r when l > 0, else l * r) when seen at all, then
// l - (frequency * output_count + presence) when seen in the output (vLLM / OpenAI).
TIDE_HD float penalized(float logit, int32_t prompt_count, int32_t output_count, float repetition, float presence,
                        float frequency) {
  if (prompt_count + output_count > 0 && repetition != 1.0f) {
    logit = logit > 0.0f ? logit / repetition : mul_rn(logit, repetition);
  }
  if (output_count > 0) {
    logit = sub_rn(logit, add_rn(mul_rn(frequency, static_cast<float>(output_count)), presence));
  }
  return logit;
}

// The logit of a listed token: its bias added first (one rounded add; none for a zero bias, which would
// turn a -0 logit into +0), then the penalties. A -inf bias gives -inf whatever the penalties.
TIDE_HD float adjusted_logit(float logit, const HistoryToken& h, const SamplingRow& row) {
  if (h.bias != 0.0f) logit = add_rn(logit, h.bias);
  return penalized(logit, h.prompt_count, h.output_count, row.repetition_penalty, row.presence_penalty,
                   row.frequency_penalty);
}

// --- weights ---

// Fixed-point scale of a weight: 2^40, so that sums over a vocabulary of up to 2^23 tokens fit in 64 bits.
inline constexpr float kWeightScale = 1099511627776.0f;

// exp(x) for x <= 0 from rounded adds and multiplies only (Cody-Waite reduction, degree-6 Taylor
// polynomial; relative error below 1e-6); 0 for x < -30, where the fixed-point weight is 0 anyway.
TIDE_HD float exp_nonpositive(float x) {
  if (!(x >= -30.0f)) return 0.0f;
  const float k = round_even(mul_rn(x, 1.44269504f));
  // ln 2 = 0.693359375 (9 bits: k * it is exact) - 2.12194440e-4 (Cephes).
  const float r = sub_rn(sub_rn(x, mul_rn(k, 0.693359375f)), mul_rn(k, -2.12194440e-4f));
  float p = 1.0f / 720.0f;
  p = add_rn(mul_rn(p, r), 1.0f / 120.0f);
  p = add_rn(mul_rn(p, r), 1.0f / 24.0f);
  p = add_rn(mul_rn(p, r), 1.0f / 6.0f);
  p = add_rn(mul_rn(p, r), 0.5f);
  p = add_rn(mul_rn(p, r), 1.0f);
  p = add_rn(mul_rn(p, r), 1.0f);
  const uint32_t scale_bits = static_cast<uint32_t>(static_cast<int32_t>(k) + 127) << 23;  // 2^k, k >= -44
  return mul_rn(p, float_of(scale_bits));
}

// A token's probability relative to the most likely one, exp((logit - max_logit) / temperature), given
// inv_temperature = 1 / temperature (rounded once, in f32). 0 for a -inf logit under a finite max_logit
// (and for the NaN of -inf - -inf: callers stop before weighing a row whose every logit is -inf).
TIDE_HD float relative_prob(float logit, float max_logit, float inv_temperature) {
  return exp_nonpositive(mul_rn(sub_rn(logit, max_logit), inv_temperature));
}

// The fixed-point weight of a relative probability: floor(prob * 2^40). Sums of weights are exact and
// independent of order, so both backends (and every run) agree on every mass and prefix sum.
TIDE_HD uint64_t weight_of(float prob) { return static_cast<uint64_t>(mul_rn(prob, kWeightScale)); }

// How much of `total` mass top-p must keep: ceil(top_p * total), at least 1.
TIDE_HD uint64_t top_p_need(float top_p, uint64_t total) {
  const double want = static_cast<double>(top_p) * static_cast<double>(total);
  uint64_t need = static_cast<uint64_t>(want);
  if (static_cast<double>(need) < want) ++need;
  if (need < 1) need = 1;
  return need > total ? total : need;
}

// --- speculative sampling against a draft's distribution (Backend::sample_with_drafts) ---

// Whether drafted token d is accepted: u < (p_d / p_total) / (q_d / q_total), with u the top 53 bits of `bits`
// times 2^-53 and each quotient one IEEE f64 division (the same bits on both backends). A draft q gives no
// weight (it could not have drawn d) is accepted exactly when p gives it some.
TIDE_HD bool accept_draft(uint64_t p_d, uint64_t p_total, uint64_t q_d, uint64_t q_total, uint64_t bits) {
  if (q_d == 0) return p_d > 0;
  const double ratio = (static_cast<double>(p_d) / static_cast<double>(p_total)) /
                       (static_cast<double>(q_d) / static_cast<double>(q_total));
  const double u = static_cast<double>(bits >> 11) * 0x1p-53;
  return u < ratio;
}

// The residual weight of a token after a refused draft: max(0, p * q_total - q * p_total), exact (< 2^104).
TIDE_HD unsigned __int128 residual_weight(uint64_t p, uint64_t p_total, uint64_t q, uint64_t q_total) {
  const unsigned __int128 a = static_cast<unsigned __int128>(p) * q_total;
  const unsigned __int128 b = static_cast<unsigned __int128>(q) * p_total;
  return a > b ? a - b : 0;
}

// floor(bits * total / 2^64) for a 128-bit total: a uniform integer in [0, total), exact.
TIDE_HD unsigned __int128 scale_to_128(uint64_t bits, unsigned __int128 total) {
  const auto hi = static_cast<uint64_t>(total >> 64), lo = static_cast<uint64_t>(total);
  return static_cast<unsigned __int128>(bits) * hi + scale_to(bits, lo);
}

}  // namespace tide::sampling
