// The CUDA logprobs op against the CPU reference: random rows with V = 256000 (float4 loads), 1000 and 1001
// (scalar loads) and tiny vocabularies, n from 0 to kMaxLogprobs; deliberate exact ties (bf16-rounded rows,
// copies of the maximum), -inf entries, a row of -inf only, rising and falling rows (the online max moves at
// every element or never). Both backends order the same input bits, so the ids must be identical; values
// agree within 1e-5 (both sum in f64; the GPU's exponentials are f32, relative error ~1e-7 each). The
// logits must come back unchanged, and an out-of-range chosen id gives NaN instead of a read outside the row.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "gpu_test_util.h"

namespace tide {
namespace {

struct Rows {
  std::vector<float> logits;   // [R, V]
  std::vector<int32_t> chosen; // [R]
};

struct Result {
  std::vector<float> values;  // [R, 1 + n]
  std::vector<int32_t> ids;   // [R, n]
};

// Row r: N(0, 3^2) logits; r % 4 == 1 rounded to bf16 (many exact ties), r % 4 == 2 with the maximum copied
// to three more tokens, r % 4 == 3 with half the tokens -inf; the last row all -inf when `all_minus_inf`.
Rows random_rows(int64_t num_rows, int64_t vocab, uint32_t seed, bool all_minus_inf) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  Rows rows;
  for (int64_t r = 0; r < num_rows; ++r) {
    std::vector<float> row(static_cast<size_t>(vocab));
    for (float& x : row) x = normal(rng);
    if (r % 4 == 1) {
      for (float& x : row) x = bf16_to_f32(f32_to_bf16(x));
    } else if (r % 4 == 2) {
      const float max = *std::max_element(row.begin(), row.end());
      for (int k = 0; k < 3; ++k) row[static_cast<size_t>(token(rng))] = max;
    } else if (r % 4 == 3) {
      for (float& x : row) {
        if (rng() % 2) x = -INFINITY;
      }
    }
    if (all_minus_inf && r == num_rows - 1) std::fill(row.begin(), row.end(), -INFINITY);
    rows.logits.insert(rows.logits.end(), row.begin(), row.end());
    rows.chosen.push_back(r % 3 == 0 ? static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin())
                                     : token(rng));
  }
  return rows;
}

Result run(Backend& backend, const Rows& rows, int64_t vocab, int n) {
  const int64_t num_rows = static_cast<int64_t>(rows.chosen.size());
  Tensor l = backend.upload(rows.logits.data(), DType::kF32, Shape{num_rows, vocab});
  Tensor c = backend.upload(rows.chosen.data(), DType::kI32, Shape{num_rows});
  Tensor values = backend.alloc(DType::kF32, Shape{num_rows, 1 + n});
  Tensor ids = backend.alloc(DType::kI32, Shape{num_rows, n});
  backend.logprobs(values, ids, l, c, n);
  Result out{std::vector<float>(static_cast<size_t>(values.numel())),
             std::vector<int32_t>(static_cast<size_t>(ids.numel()))};
  backend.download(values, out.values.data());
  if (ids.numel() > 0) backend.download(ids, out.ids.data());
  // The logits are not modified, bit for bit.
  std::vector<float> after(rows.logits.size());
  backend.download(l, after.data());
  EXPECT_EQ(std::memcmp(after.data(), rows.logits.data(), after.size() * sizeof(float)), 0) << backend.name();
  return out;
}

void expect_values_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < want.size() && bad < 10; ++i) {
    if (std::isnan(want[i]) || std::isinf(want[i])) {
      const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
      EXPECT_TRUE(same) << "value " << i << ": " << got[i] << " vs " << want[i];
      bad += !same;
    } else {
      EXPECT_NEAR(got[i], want[i], 1e-5) << "value " << i;
      bad += !(std::abs(got[i] - want[i]) <= 1e-5);
    }
  }
}

void compare(const Rows& rows, int64_t vocab, int n) {
  SCOPED_TRACE(::testing::Message() << rows.chosen.size() << " rows, V " << vocab << ", n " << n);
  CpuBackend cpu;
  CudaBackend gpu;
  const Result want = run(cpu, rows, vocab, n);
  const Result got = run(gpu, rows, vocab, n);
  EXPECT_EQ(got.ids, want.ids);
  expect_values_near(got.values, want.values);
}

TEST(CudaLogprobs, FullVocabularyMatchesCpu) {
  TIDE_REQUIRE_GPU();
  const int64_t vocab = 256000;
  const Rows rows = random_rows(12, vocab, 11, true);
  for (int n : {kMaxLogprobs, 5, 1, 0}) compare(rows, vocab, n);
}

TEST(CudaLogprobs, SmallVocabulariesMatchCpu) {
  TIDE_REQUIRE_GPU();
  compare(random_rows(64, 1000, 12, true), 1000, kMaxLogprobs);
  compare(random_rows(20, 1001, 13, false), 1001, 3);
  compare(random_rows(8, 7, 14, true), 7, 7);  // n = V < kMaxLogprobs
  compare(random_rows(4, 1, 15, false), 1, 1);
  compare(random_rows(3, 20, 16, false), 20, kMaxLogprobs);
}

TEST(CudaLogprobs, RisingAndFallingRowsMatchCpu) {
  TIDE_REQUIRE_GPU();
  const int64_t vocab = 256000;
  Rows rows;
  for (int64_t i = 0; i < vocab; ++i) rows.logits.push_back(-20.0f + 40.0f * static_cast<float>(i) / vocab);
  for (int64_t i = 0; i < vocab; ++i) rows.logits.push_back(20.0f - 40.0f * static_cast<float>(i) / vocab);
  rows.chosen = {static_cast<int32_t>(vocab - 1), 12345};
  compare(rows, vocab, kMaxLogprobs);
}

TEST(CudaLogprobs, OutOfRangeChosenIdGivesNan) {
  TIDE_REQUIRE_GPU();
  const int64_t vocab = 1000;
  Rows rows = random_rows(3, vocab, 17, false);
  CpuBackend cpu;
  const Result want = run(cpu, rows, vocab, 4);
  rows.chosen[0] = -1;
  rows.chosen[2] = static_cast<int32_t>(vocab);
  CudaBackend gpu;
  const Result got = run(gpu, rows, vocab, 4);
  EXPECT_TRUE(std::isnan(got.values[0]));
  EXPECT_TRUE(std::isnan(got.values[2 * 5]));
  EXPECT_NEAR(got.values[5], want.values[5], 1e-5);  // row 1 keeps its chosen id
  EXPECT_EQ(got.ids, want.ids);                      // the top tokens do not depend on the chosen id
  for (size_t j = 11; j < 15; ++j) EXPECT_NEAR(got.values[j], want.values[j], 1e-5);  // row 2's top 4
}

TEST(CudaLogprobs, EmptyBatchAndBadArguments) {
  TIDE_REQUIRE_GPU();
  CudaBackend gpu;
  gpu.logprobs(gpu.alloc(DType::kF32, Shape{0, 3}), gpu.alloc(DType::kI32, Shape{0, 2}),
               gpu.alloc(DType::kF32, Shape{0, 10}), gpu.alloc(DType::kI32, Shape{0}), 2);
  EXPECT_THROW(gpu.logprobs(gpu.alloc(DType::kF32, Shape{1, 22}), gpu.alloc(DType::kI32, Shape{1, 21}),
                            gpu.alloc(DType::kF32, Shape{1, 100}), gpu.alloc(DType::kI32, Shape{1}), 21),
               Error);
  EXPECT_THROW(gpu.logprobs(gpu.alloc(DType::kF32, Shape{1, 3}), gpu.alloc(DType::kI32, Shape{1, 2}),
                            gpu.alloc(DType::kBF16, Shape{1, 100}), gpu.alloc(DType::kI32, Shape{1}), 2),
               Error);
}

}  // namespace
}  // namespace tide
