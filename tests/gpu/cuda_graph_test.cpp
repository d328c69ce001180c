// Decode steps replayed from recorded CUDA graphs against the same steps run op by op: several sequences at
// different positions, batches that shrink and grow again (graphs of other padded sizes, then a replay of
// the first one with new inputs), and positions that cross a bucket boundary (a new recording); verify steps
// (several tokens per sequence, every one a logit row, as speculative decoding runs them) with the steps after
// them; and the same steps with and without programmatic
// dependent launch (launch.cuh), bit for bit.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "../step_runner.h"
#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "gpu_test_util.h"
#include "kv/kv_cache_manager.h"
#include "model/cohere2.h"

namespace tide {
namespace {

// The fixture with head_dim 128 on the GPU (or the CPU), three sequences.
test::StepRunner runner(bool graphs, bool fp8 = false, bool cpu = false) {
  return test::StepRunner(cpu ? std::unique_ptr<Backend>(std::make_unique<CpuBackend>()) : std::make_unique<CudaBackend>(),
                          "cohere2-tiny-hd128", graphs, 3, WeightLoadOptions{fp8, {}});
}

TEST(CudaGraphs, ReplayedDecodeStepsMatchEagerSteps) {
  TIDE_REQUIRE_GPU();
  test::StepRunner graph = runner(true), eager = runner(false);
  const int32_t vocab = static_cast<int32_t>(graph.model.config().vocab_size);
  // Prompts of 12, 40 and 250 tokens (more than a verify step's 8: eager): the last sequence crosses the
  // 256-position bucket while decoding.
  const std::vector<int64_t> prompt_lengths = {12, 40, 250};
  for (int s = 0; s < 3; ++s) {
    const auto prompt = test::spread_ids(prompt_lengths[static_cast<size_t>(s)], s + 1, vocab);
    const auto a = graph.step({s}, {prompt}), b = eager.step({s}, {prompt});
    ASSERT_LT(test::rel_err(a, b), 1e-6) << "prefill is eager in both";
  }
  // Batches of 3, 3, 2 (another graph), 1, 3 (the first graph replayed with new inputs), ...
  const std::vector<std::vector<int>> steps = {{0, 1, 2}, {0, 1, 2}, {0, 2}, {1}, {0, 1, 2}, {2, 1, 0},
                                               {0, 1, 2}, {0, 1, 2}, {1, 2}, {0, 1, 2}};
  for (size_t k = 0; k < steps.size(); ++k) {
    std::vector<std::vector<int32_t>> tokens;
    for (int s : steps[k]) tokens.push_back(test::spread_ids(1, static_cast<int32_t>(100 * k + static_cast<size_t>(s)), vocab));
    const std::vector<float> a = graph.step(steps[k], tokens), b = eager.step(steps[k], tokens);
    ASSERT_EQ(a.size(), b.size());
    // The same math; padding rows and the attention split count may round differently in bf16. A stale input
    // (a wrong token, position or table) would be off by far more.
    EXPECT_LT(test::rel_err(a, b), 1e-2) << "step " << k;
    for (size_t r = 0; r < steps[k].size(); ++r) {
      const auto row = [&](const std::vector<float>& v) {
        return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(r * vocab),
                                  v.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab));
      };
      EXPECT_LT(test::rel_err(row(a), row(b)), 1e-2) << "step " << k << " row " << r;
    }
  }
  EXPECT_GT(graph.seqs[2].num_computed(), 256);
}

// Verify steps: 1 + k tokens per sequence, the same k for every sequence of a step or differing (replayed from
// graphs, every sequence padded to the step's most tokens and the batch to a power of two of sequences; where
// that would more than double the tokens, op by op), one sequence crossing the 256-position bucket; then
// steps with the logits of each sequence's last token only (a graph that gathers its rows first); the steps after each read the K/V it stored, so a stale input or a row taken from
// the wrong place would show (a relative error of order 1). Both runners are also held to the CPU backend's
// f32 (or FP8) logits of the same steps. With FP8 weights the padded token count runs other matmul kernels,
// whose f32 sums differ in the last bits, and per-token E4M3 activations turn such differences into other
// codes: on this random-weight fixture that is a few percent of the logits (measured: graph against eager
// 0.047-0.059 per step, each against the CPU's FP8 0.092-0.105, as the eager prefill is), so the FP8 rule is that
// the graph is as close to the CPU as the eager runner is.
TEST(CudaGraphs, ReplayedVerifyStepsMatchEagerSteps) {
  TIDE_REQUIRE_GPU();
  for (bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "FP8" : "bf16");
    test::StepRunner graph = runner(true, fp8), eager = runner(false, fp8), cpu = runner(false, fp8, true);
    const int32_t vocab = static_cast<int32_t>(graph.model.config().vocab_size);
    const std::vector<int64_t> prompt_lengths = {30, 100, 240};
    for (int s = 0; s < 3; ++s) {
      const auto prompt = test::spread_ids(prompt_lengths[static_cast<size_t>(s)], s + 1, vocab);
      const std::vector<float> e = eager.step({s}, {prompt});
      ASSERT_LT(test::rel_err(graph.step({s}, {prompt}), e), 1e-6);
      cpu.step({s}, {prompt});
    }
    // Tokens per sequence of each step (0: not in the step); from step 10 on, the last token's logits only.
    const std::vector<std::vector<int64_t>> steps = {{5, 5, 5}, {3, 5, 1}, {1, 1, 1}, {5, 2, 4}, {0, 8, 3},
                                                     {5, 5, 5}, {1, 1, 1}, {2, 0, 7}, {4, 4, 4}, {1, 1, 1},
                                                     {3, 3, 3}, {4, 0, 2}, {2, 1, 1}, {3, 3, 3}, {0, 6, 0}};
    constexpr size_t kLastOnly = 10;
    for (size_t k = 0; k < steps.size(); ++k) {
      std::vector<int> which;
      std::vector<std::vector<int32_t>> tokens;
      for (int s = 0; s < 3; ++s) {
        const int64_t n = steps[k][static_cast<size_t>(s)];
        if (n == 0) continue;
        which.push_back(s);
        tokens.push_back(test::spread_ids(n, static_cast<int32_t>(100 * k + static_cast<size_t>(s)), vocab));
      }
      const bool last = k >= kLastOnly;
      const std::vector<float> a = graph.step(which, tokens, last), b = eager.step(which, tokens, last),
                               c = cpu.step(which, tokens, last);
      ASSERT_EQ(a.size(), b.size());
      ASSERT_EQ(a.size(), c.size());
      const double graph_cpu = test::rel_err(a, c), eager_cpu = test::rel_err(b, c);
      std::printf("[ verify   ] %s step %zu: graph vs eager %.4f, graph vs cpu %.4f, eager vs cpu %.4f\n",
                  fp8 ? "fp8" : "bf16", k, test::rel_err(a, b), graph_cpu, eager_cpu);
      // bf16 on the GPU against f32 on the CPU: about 1e-2 (transformers' own bf16 error on this fixture).
      EXPECT_LT(eager_cpu, fp8 ? 0.15 : 0.02) << "step " << k;
      EXPECT_LT(graph_cpu, fp8 ? 1.15 * eager_cpu + 0.005 : 0.02) << "step " << k;
      const size_t rows = a.size() / static_cast<size_t>(vocab);
      for (size_t r = 0; r < rows; ++r) {
        const auto row = [&](const std::vector<float>& v) {
          return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(r * vocab),
                                    v.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab));
        };
        // As for decode steps: padding and the attention split count round differently in bf16.
        EXPECT_LT(test::rel_err(row(a), row(b)), fp8 ? 0.15 : 1e-2) << "step " << k << " row " << r;
      }
    }
    EXPECT_GT(graph.seqs[2].num_computed(), 256);
    // Every step but {3, 5, 1} (4 x 5 padded tokens for 9) replayed or recorded a graph.
    const Cohere2Model::GraphCounts counts = graph.model.graph_counts();
    EXPECT_EQ(counts.padded, static_cast<int64_t>(steps.size()) - 1);
    EXPECT_EQ(counts.replayed + counts.recorded, counts.padded);
  }
}

// Programmatic dependent launch lets a kernel start before the previous one has finished; each kernel waits
// for it before touching its data, so the results are the same bits. A kernel that read or wrote too early
// would race with the one before it and, in some step, differ. FP8 weights (the small-batch matmul kernel)
// and bf16, prefill (eager) and decode (graphs).
TEST(CudaGraphs, ProgrammaticLaunchChangesNoBit) {
  TIDE_REQUIRE_GPU();
  for (bool fp8 : {true, false}) {
    test::StepRunner with = runner(true, fp8), without = runner(true, fp8);
    const int32_t vocab = static_cast<int32_t>(with.model.config().vocab_size);
    auto step = [&](const std::vector<int>& which, const std::vector<std::vector<int32_t>>& tokens) {
      CudaBackend::set_programmatic_launch(true);
      const std::vector<float> a = with.step(which, tokens);
      CudaBackend::set_programmatic_launch(false);
      const std::vector<float> b = without.step(which, tokens);
      CudaBackend::set_programmatic_launch(true);
      return std::make_pair(a, b);
    };
    for (int s = 0; s < 3; ++s) {
      const auto [a, b] = step({s}, {test::spread_ids(20 + 30 * s, s + 1, vocab)});
      ASSERT_EQ(a, b) << "prefill of sequence " << s << (fp8 ? " (FP8)" : " (bf16)");
    }
    for (int k = 0; k < 12; ++k) {
      const std::vector<int> which = k % 3 == 2 ? std::vector<int>{2, 0} : std::vector<int>{0, 1, 2};
      std::vector<std::vector<int32_t>> tokens;
      for (int s : which) tokens.push_back(test::spread_ids(1, 100 * k + s, vocab));
      const auto [a, b] = step(which, tokens);
      ASSERT_EQ(a, b) << "decode step " << k << (fp8 ? " (FP8)" : " (bf16)");
    }
  }
}

}  // namespace
}  // namespace tide
