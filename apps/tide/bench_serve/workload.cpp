#include "apps/tide/bench_serve/workload.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>

#include "core/error.h"

namespace tide::bench {
namespace {

// A seeded generator whose draws are the same with every standard library: mt19937_64's output sequence is
// fixed by the standard, the std distributions' algorithms are not, so the draws are made here.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  // Uniform in [low, high], by rejection (no modulo bias).
  int64_t uniform_int(int64_t low, int64_t high) {
    const uint64_t span = static_cast<uint64_t>(high - low) + 1;
    if (span == 0) return static_cast<int64_t>(engine_());  // the whole 64-bit range
    const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % span;
    uint64_t x = engine_();
    while (x >= limit) x = engine_();
    return low + static_cast<int64_t>(x % span);
  }
  // Uniform in [0, 1).
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Standard normal (Box-Muller).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  // Gamma of the given shape and scale 1 (Marsaglia and Tsang; shape < 1 through shape + 1).
  double gamma(double shape) {
    if (shape < 1.0) return gamma(shape + 1.0) * std::pow(1.0 - uniform(), 1.0 / shape);
    const double d = shape - 1.0 / 3.0;
    const double c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x = 0, v = 0;
      do {
        x = normal();
        v = 1.0 + c * x;
      } while (v <= 0);
      v = v * v * v;
      const double u = 1.0 - uniform();
      if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
    }
  }

 private:
  std::mt19937_64 engine_;
};

void append_ids(std::vector<int32_t>& out, int64_t n, int32_t first_id, int64_t vocab_size, Rng& rng) {
  for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<int32_t>(rng.uniform_int(first_id, vocab_size - 1)));
}

}  // namespace

const char* dataset_name(Dataset dataset) { return dataset == Dataset::kRandom ? "random" : "shared-prefix"; }

LengthRange length_range(int64_t len, double ratio, int64_t min) {
  const auto low = static_cast<int64_t>(std::floor(static_cast<double>(len) * (1.0 - ratio)));
  const auto high = static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1.0 + ratio)));
  return {std::max(low, min), std::max(high, min)};
}

int32_t first_token_id(int64_t vocab_size) { return vocab_size >= 512 ? 256 : 0; }

std::vector<BenchPrompt> make_workload(const WorkloadOptions& o) {
  if (o.vocab_size < 1) fail("the vocabulary size is unknown (--vocab-size, or a server whose /v1/models has it)");
  if (o.num_prompts < 1) fail("--num-prompts must be at least 1");
  if (!(o.range_ratio >= 0 && o.range_ratio < 1)) fail("--random-range-ratio must be in [0, 1)");
  if (o.input_len < 0 || o.output_len < 1 || o.prefix_len < 0) {
    fail("--random-input-len and --random-prefix-len must be >= 0, --random-output-len >= 1");
  }
  const bool grouped = o.dataset == Dataset::kSharedPrefix;
  if (grouped && (o.num_groups < 1 || o.group_prefix_len < 0)) {
    fail("--shared-prefix-groups must be at least 1 and --shared-prefix-len at least 0");
  }
  const LengthRange input = length_range(o.input_len, o.range_ratio, 0);
  const LengthRange output = length_range(o.output_len, o.range_ratio, 1);
  const int64_t shared = o.prefix_len + (grouped ? o.group_prefix_len : 0);
  if (shared + input.low < 1) fail("every prompt needs a token: raise --random-input-len or a prefix length");

  Rng rng(o.seed);
  const int32_t first_id = first_token_id(o.vocab_size);
  std::vector<int32_t> common;
  append_ids(common, o.prefix_len, first_id, o.vocab_size, rng);
  std::vector<std::vector<int32_t>> group_prefixes(grouped ? static_cast<size_t>(o.num_groups) : 1);
  if (grouped) {
    for (auto& p : group_prefixes) append_ids(p, o.group_prefix_len, first_id, o.vocab_size, rng);
  }
  std::vector<BenchPrompt> prompts(static_cast<size_t>(o.num_prompts));
  for (int64_t i = 0; i < o.num_prompts; ++i) {
    BenchPrompt& p = prompts[static_cast<size_t>(i)];
    p.group = grouped ? i % o.num_groups : 0;
    p.ids = common;
    const auto& group_prefix = group_prefixes[static_cast<size_t>(p.group)];
    p.ids.insert(p.ids.end(), group_prefix.begin(), group_prefix.end());
    p.num_shared = static_cast<int64_t>(p.ids.size());
    append_ids(p.ids, rng.uniform_int(input.low, input.high), first_id, o.vocab_size, rng);
    p.max_tokens = rng.uniform_int(output.low, output.high);
  }
  return prompts;
}

std::vector<double> arrival_times(int64_t n, double rate, double burstiness, uint64_t seed) {
  if (!(rate > 0)) fail("--request-rate must be positive (inf: all requests at once)");
  if (!(burstiness > 0)) fail("--burstiness must be positive");
  std::vector<double> times(static_cast<size_t>(std::max<int64_t>(n, 0)), 0.0);
  if (std::isinf(rate) || times.empty()) return times;
  // Its own stream: the arrivals do not shift when the prompts' options change.
  Rng rng(seed ^ 0x9e3779b97f4a7c15ULL);
  double t = 0;
  for (double& time : times) {
    t += std::isinf(burstiness) ? 1.0 / rate : rng.gamma(burstiness) / (rate * burstiness);
    time = t;
  }
  const double scale = (static_cast<double>(n) / rate) / times.back();
  for (double& time : times) time *= scale;
  return times;
}

}  // namespace tide::bench
