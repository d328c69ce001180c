// The greedy criterion of a bf16 engine (fixtures/README.md, "Tolerances that are fair"): its greedy ids
// equal the reference's until the first step where they differ, and at that step the f32 reference's top-2
// margin is within bf16 noise. Shared by the GPU golden and batch tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "../test_util.h"
#include "runtime/engine.h"

namespace tide::test {

// The relative noise of bf16 logits: 3 × transformers' own bf16 error on the fixture's longest case.
inline double bf16_logit_noise(const nlohmann::json& golden) {
  return 3 * golden["cases"].back()["hf_bf16_rel_err"].get<double>();
}

struct GreedyAgreement {
  size_t agree = 0;    // leading ids equal to the reference's
  size_t total = 0;    // reference ids
  double margin = 0;   // the reference's top-2 margin at the first differing step (0 when none differs)
  double bound = 0;    // noise × rms of the reference's logits there
};

// Checks `got`, greedy ids a bf16 engine produced after `prompt`, against `want`, the reference's greedy ids
// after `prompt`: equal until the first difference, where the f32 `reference` engine's top-2 margin must be
// below `noise` × the rms of its logits (a gap that small can flip in bf16). A length mismatch is a failure.
// `what` names the case in failure messages.
inline GreedyAgreement expect_greedy_within_bf16_noise(Engine& reference, std::span<const int32_t> prompt,
                                                       const std::vector<int32_t>& want,
                                                       const std::vector<int32_t>& got, double noise,
                                                       const std::string& what) {
  GreedyAgreement a;
  a.total = want.size();
  EXPECT_EQ(got.size(), want.size()) << what;
  a.agree = static_cast<size_t>(std::mismatch(got.begin(), got.end(), want.begin(), want.end()).first - got.begin());
  if (a.agree == std::min(got.size(), want.size())) return a;
  std::vector<int32_t> context(prompt.begin(), prompt.end());
  context.insert(context.end(), want.begin(), want.begin() + static_cast<std::ptrdiff_t>(a.agree));
  std::vector<float> logits = reference.prompt_logits(context, /*all_positions=*/false)[0];
  double rms = 0;
  for (float v : logits) rms += double{v} * v;
  rms = std::sqrt(rms / static_cast<double>(logits.size()));
  std::partial_sort(logits.begin(), logits.begin() + 2, logits.end(), std::greater<float>());
  a.margin = double{logits[0]} - logits[1];
  a.bound = noise * rms;
  EXPECT_LT(a.margin, a.bound) << what << ": diverged at step " << a.agree << " with a clear reference margin";
  return a;
}

}  // namespace tide::test
