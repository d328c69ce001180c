// The logprobs op of the CPU backend: the reference (backend.h gives the contract). Reference, not fast: per
// row one pass for the max, one for the sum of exponentials in f64, and a partial sort of the ids for the
// top n, ordered by the sample op's bit keys (sampling_math.h) so that ties resolve as on every backend.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace tide {
namespace {

// log(sum exp(logits)) of one row, or NaN when every logit is -inf.  logits: [V]
double log_sum_exp(std::span<const float> logits) {
  float max_logit = -INFINITY;
  for (float x : logits) max_logit = std::max(max_logit, x);
  if (max_logit == -INFINITY) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (float x : logits) sum += std::exp(double{x} - double{max_logit});  // exp(-inf) = 0
  return double{max_logit} + std::log(sum);
}

}  // namespace

// out_values: [R, 1 + n] f32, out_ids: [R, n] i32, logits: [R, V] f32, chosen_ids: [R] i32
void CpuBackend::logprobs(Tensor out_values, Tensor out_ids, const Tensor& logits, const Tensor& chosen_ids, int n) {
  check_logprobs_args(out_values, out_ids, logits, chosen_ids, n);
  const int64_t num_rows = logits.dim(0), vocab = logits.dim(1);
  for (int64_t r = 0; r < num_rows; ++r) {  // before writing anything
    const int32_t chosen = chosen_ids.as<int32_t>()[r];
    if (chosen < 0 || chosen >= vocab) {
      fail("logprobs: chosen id {} of row {} is out of range (vocabulary {})", chosen, r, vocab);
    }
  }
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int64_t r = 0; r < num_rows; ++r) {
    const std::span<const float> row(logits.as<float>() + r * vocab, static_cast<size_t>(vocab));
    float* values = out_values.as<float>() + r * (1 + n);
    int32_t* ids = out_ids.as<int32_t>() + r * n;

    const double lse = log_sum_exp(row);
    auto logprob = [&](int32_t id) { return static_cast<float>(double{row[static_cast<size_t>(id)]} - lse); };
    values[0] = logprob(chosen_ids.as<int32_t>()[r]);
    // The n largest keys, the lowest id first among equal keys.
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t a, int32_t b) {
      const uint32_t ka = sampling::order_key(row[static_cast<size_t>(a)]);
      const uint32_t kb = sampling::order_key(row[static_cast<size_t>(b)]);
      return ka != kb ? ka > kb : a < b;
    });
    for (int j = 0; j < n; ++j) {
      ids[j] = order[static_cast<size_t>(j)];
      values[1 + j] = logprob(ids[j]);
    }
  }
}

}  // namespace tide
