// The CPU backend's speculative sampling against a draft's distribution (Backend::sample_with_drafts): the
// tokens it gives follow the row's own distribution whatever the draft's, it accepts drafts at the rate the
// rule implies, and it refuses malformed drafts naming the field. Fixed (seed, counter) pairs: the counts are
// deterministic and the 5-sigma tolerances cannot flake.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "sampling_test_util.h"

namespace tide {
namespace {

using test::expect_frequencies;
using test::kSeed;
using test::logits_of;
using test::sample_one;
using test::sampled;

// Speculative sampling against a draft's distribution: a draft d drawn from q, then checked by
// sample_with_drafts against the row's p, gives tokens distributed as p, whatever q is (here q far from p,
// q equal to p, q under top-k, p greedy); it accepts about sum_x min(p(x), q(x)) of the drafts; and the draft
// is the output exactly when accepted (a refused draft's residual never holds it).
TEST(CpuSampling, DraftCheckedAgainstItsDistributionKeepsTheTargets) {
  CpuBackend cpu;
  const std::vector<double> p = {0.1, 0.2, 0.3, 0.4, 0.0001};
  struct Case {
    std::vector<double> q;
    int32_t q_top_k;
    double accepted;  // sum min(p, q') for q' = q after its filter
  };
  const Case cases[] = {
      {{0.4, 0.3, 0.2, 0.05, 0.05}, 0, 0.1 + 0.2 + 0.2 + 0.05 + 0.0001},
      {{0.1, 0.2, 0.3, 0.4, 0.0001}, 0, 1.0},
      {{0.05, 0.05, 0.1, 0.2, 0.6}, 2, 0.25 + 0.0001},  // q' = {0, 0, 0, 0.25, 0.75}
  };
  const std::vector<float> lp = logits_of(p);
  const int draws = 20000;
  for (const Case& c : cases) {
    const std::vector<float> lq = logits_of(c.q);
    SamplingRow q_draw = sampled(), q_check = sampled();
    q_draw.top_k = q_check.top_k = c.q_top_k;
    q_draw.seed = kSeed + 1;
    q_check.seed = kSeed + 2;
    std::map<int32_t, int> counts;
    int accepted = 0;
    for (int i = 0; i < draws; ++i) {
      q_draw.counter = q_check.counter = static_cast<uint64_t>(i);
      const int32_t d = sample_one(cpu, lq, q_draw);
      Tensor l = cpu.upload(lp.data(), DType::kF32, Shape{1, 5});
      Tensor ql = cpu.upload(lq.data(), DType::kF32, Shape{1, 5});
      Tensor ids = cpu.alloc(DType::kI32, Shape{1});
      SamplingRow row = sampled();
      row.counter = static_cast<uint64_t>(i);
      const int32_t index = 0;
      cpu.sample_with_drafts(ids, l, SamplingBatch{std::span(&row, 1), {}, {}, {}, {}},
                             DraftSampling{ql, std::span(&q_check, 1), std::span(&d, 1), std::span(&index, 1)});
      const int32_t got = ids.as<int32_t>()[0];
      ++counts[got];
      accepted += got == d ? 1 : 0;
    }
    expect_frequencies(counts, p, draws);
    const double sigma = std::sqrt(c.accepted * (1 - c.accepted) / draws);
    EXPECT_NEAR(accepted / double(draws), c.accepted, 5 * sigma + 1e-3);
  }
  // A greedy row accepts exactly its argmax, and otherwise gives it.
  const std::vector<float> lq = logits_of({0.3, 0.3, 0.2, 0.1, 0.1});
  for (int32_t d = 0; d < 5; ++d) {
    Tensor l = cpu.upload(lp.data(), DType::kF32, Shape{1, 5});
    Tensor ql = cpu.upload(lq.data(), DType::kF32, Shape{1, 5});
    Tensor ids = cpu.alloc(DType::kI32, Shape{1});
    const SamplingRow greedy{}, q = sampled();
    const int32_t index = 0;
    cpu.sample_with_drafts(ids, l, SamplingBatch{std::span(&greedy, 1), {}, {}, {}, {}},
                           DraftSampling{ql, std::span(&q, 1), std::span(&d, 1), std::span(&index, 1)});
    EXPECT_EQ(ids.as<int32_t>()[0], 3) << "draft " << d;
  }
}

TEST(CpuSampling, DraftSamplingRefusesBadDraftsNamingTheField) {
  CpuBackend cpu;
  const std::vector<float> lp = {0.0f, 1.0f, 2.0f};
  Tensor l = cpu.upload(lp.data(), DType::kF32, Shape{1, 3});
  Tensor ql = cpu.upload(lp.data(), DType::kF32, Shape{1, 3});
  Tensor ids = cpu.alloc(DType::kI32, Shape{1});
  const SamplingRow row = sampled();
  const SamplingBatch batch{std::span(&row, 1), {}, {}, {}, {}};
  auto error = [&](const SamplingRow& q, int32_t d, int32_t index) {
    try {
      cpu.sample_with_drafts(ids, l, batch, DraftSampling{ql, std::span(&q, 1), std::span(&d, 1), std::span(&index, 1)});
      return std::string("no error");
    } catch (const Error& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(error(sampled(), 1, 0), "no error");
  EXPECT_EQ(error(sampled(), 1, -1), "no error");
  EXPECT_NE(error(sampled(), 3, 0).find("draft id 3 is out of range"), std::string::npos);
  EXPECT_NE(error(sampled(), 1, 1).find("draft index[0] = 1"), std::string::npos);
  EXPECT_NE(error(SamplingRow{}, 1, 0).find("temperature 0"), std::string::npos);
}

}  // namespace
}  // namespace tide
