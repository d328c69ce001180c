// The logprobs op of the CPU backend, the reference: log_softmax values against a direct f64 formula on
// hand-made rows (ties, -inf entries, a row of -inf only, n = 0, n = kMaxLogprobs, n = V < kMaxLogprobs, large
// logits), the order of the top tokens (the lowest id first among equal logits), row independence, the
// logits left untouched, and the argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"

namespace tide {
namespace {

struct Result {
  std::vector<float> values;  // [R, 1 + n]
  std::vector<int32_t> ids;   // [R, n]
};

// logits: [R, V] row-major.
Result run(CpuBackend& cpu, const std::vector<float>& logits, int64_t vocab, const std::vector<int32_t>& chosen,
           int n) {
  const int64_t rows = static_cast<int64_t>(chosen.size());
  Tensor l = cpu.upload(logits.data(), DType::kF32, Shape{rows, vocab});
  Tensor c = cpu.upload(chosen.data(), DType::kI32, Shape{rows});
  Tensor values = cpu.alloc(DType::kF32, Shape{rows, 1 + n});
  Tensor ids = cpu.alloc(DType::kI32, Shape{rows, n});
  cpu.logprobs(values, ids, l, c, n);
  EXPECT_EQ(std::vector<float>(l.as<float>(), l.as<float>() + rows * vocab), logits);  // not modified
  return {std::vector<float>(values.as<float>(), values.as<float>() + values.numel()),
          std::vector<int32_t>(ids.as<int32_t>(), ids.as<int32_t>() + ids.numel())};
}

// log_softmax of one row in f64, directly.
std::vector<double> log_softmax(const std::vector<float>& row) {
  double max = -INFINITY;
  for (float x : row) max = std::max(max, double{x});
  double sum = 0;
  for (float x : row) sum += std::exp(double{x} - max);
  std::vector<double> out;
  for (float x : row) out.push_back(double{x} - max - std::log(sum));
  return out;
}

// Within f32 rounding of the exact value (or both -inf).
void expect_logprob(float got, double want, const std::string& what) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, want) << what;
  } else {
    EXPECT_NEAR(got, want, 1e-6 * std::max(1.0, std::abs(want))) << what;
  }
}

// Checks one row's result against the formula: the chosen value, and the top n as the first n of the ids
// sorted by (logit desc, id asc).
void expect_row(const std::vector<float>& row, int32_t chosen, int n, const float* values, const int32_t* ids) {
  const std::vector<double> want = log_softmax(row);
  expect_logprob(values[0], want[static_cast<size_t>(chosen)], "chosen " + std::to_string(chosen));
  std::vector<int32_t> order(row.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  for (int j = 0; j < n; ++j) {
    EXPECT_EQ(ids[j], order[static_cast<size_t>(j)]) << "rank " << j;
    expect_logprob(values[1 + j], want[static_cast<size_t>(ids[j])], "rank " + std::to_string(j));
  }
}

TEST(CpuLogprobs, MatchesTheFormulaWithTiesLowestIdFirst) {
  CpuBackend cpu;
  const std::vector<float> row = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f, -1.5f};
  for (int n : {0, 1, 3, 6}) {
    const Result r = run(cpu, row, 6, {5}, n);
    ASSERT_EQ(r.values.size(), static_cast<size_t>(1 + n));
    expect_row(row, 5, n, r.values.data(), r.ids.data());
  }
  const Result r = run(cpu, row, 6, {2}, 4);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2, 4, 3}));
  EXPECT_EQ(r.values[1], r.values[2]);  // equal logits, equal logprobs
  EXPECT_EQ(r.values[2], r.values[3]);
  EXPECT_EQ(r.values[0], r.values[2]);
  // Uniform: log(1 / V) each.
  const Result u = run(cpu, std::vector<float>(4, 0.5f), 4, {3}, 4);
  EXPECT_EQ(u.ids, (std::vector<int32_t>{0, 1, 2, 3}));
  for (float v : u.values) EXPECT_NEAR(v, std::log(0.25), 1e-7);
}

TEST(CpuLogprobs, MinusInfinityLogitsHaveLogprobMinusInfinity) {
  CpuBackend cpu;
  const std::vector<float> row = {-INFINITY, 0.0f, -INFINITY, static_cast<float>(std::log(3.0))};
  const Result r = run(cpu, row, 4, {0}, 4);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{3, 1, 0, 2}));
  EXPECT_EQ(r.values[0], -INFINITY);
  EXPECT_NEAR(r.values[1], std::log(0.75), 1e-7);
  EXPECT_NEAR(r.values[2], std::log(0.25), 1e-7);
  EXPECT_EQ(r.values[3], -INFINITY);
  EXPECT_EQ(r.values[4], -INFINITY);
}

TEST(CpuLogprobs, RowOfMinusInfinityOnlyIsNanWithTheLowestIds) {
  CpuBackend cpu;
  const Result r = run(cpu, std::vector<float>(5, -INFINITY), 5, {2}, 3);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1, 2}));
  for (float v : r.values) EXPECT_TRUE(std::isnan(v));
}

TEST(CpuLogprobs, SignedZerosOrderAsTheSampleOpOrdersThem) {
  CpuBackend cpu;
  const Result r = run(cpu, {-0.0f, 0.0f, -1.0f}, 3, {0}, 3);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 0, 2}));  // bit keys: -0 just below +0
  EXPECT_EQ(r.values[1], r.values[2]);
}

TEST(CpuLogprobs, TwentyOfAHundredAndAllOfAShortRow) {
  CpuBackend cpu;
  std::vector<float> row;
  for (int i = 0; i < 100; ++i) row.push_back(static_cast<float>(std::sin(0.7 * i) * 4 + 0.01 * i));
  row[17] = row[42];  // one exact tie among the largest
  const int32_t top = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  const Result r = run(cpu, row, 100, {top}, kMaxLogprobs);
  expect_row(row, top, kMaxLogprobs, r.values.data(), r.ids.data());
  const std::vector<float> short_row = {0.3f, -2.0f, 5.0f, 0.3f, 1.0f, -INFINITY, 4.0f};
  const Result s = run(cpu, short_row, 7, {6}, 7);
  EXPECT_EQ(s.ids, (std::vector<int32_t>{2, 6, 4, 0, 3, 1, 5}));
  expect_row(short_row, 6, 7, s.values.data(), s.ids.data());
}

TEST(CpuLogprobs, LargeLogitsAndALargeVocabulary) {
  CpuBackend cpu;
  const Result big = run(cpu, {1000.0f, 999.0f, -1000.0f}, 3, {1}, 2);
  EXPECT_NEAR(big.values[1], -std::log1p(std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(big.values[0], -1.0 - std::log1p(std::exp(-1.0)), 1e-6);
  // 256000 equal logits: the f64 sum makes each exactly -log(V) to f32 rounding.
  const int64_t vocab = 256000;
  const std::vector<float> equal(static_cast<size_t>(vocab), -7.25f);
  const Result flat = run(cpu, equal, vocab, {static_cast<int32_t>(vocab - 1)}, kMaxLogprobs);
  EXPECT_FLOAT_EQ(flat.values[0], static_cast<float>(-std::log(double(vocab))));
  for (int j = 0; j < kMaxLogprobs; ++j) EXPECT_EQ(flat.ids[static_cast<size_t>(j)], j);
}

TEST(CpuLogprobs, RowsAreIndependent) {
  CpuBackend cpu;
  const int64_t vocab = 30;
  std::vector<float> logits;
  for (int64_t i = 0; i < 3 * vocab; ++i) logits.push_back(static_cast<float>(std::cos(1.3 * i) * 5));
  const std::vector<int32_t> chosen = {4, 29, 0};
  const int n = 5;
  const Result all = run(cpu, logits, vocab, chosen, n);
  for (size_t r = 0; r < chosen.size(); ++r) {
    const std::vector<float> row(logits.begin() + static_cast<std::ptrdiff_t>(r * vocab),
                                 logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * vocab));
    expect_row(row, chosen[r], n, all.values.data() + r * (1 + n), all.ids.data() + r * n);
    const Result one = run(cpu, row, vocab, {chosen[r]}, n);
    EXPECT_EQ(one.values, std::vector<float>(all.values.begin() + static_cast<std::ptrdiff_t>(r * (1 + n)),
                                             all.values.begin() + static_cast<std::ptrdiff_t>((r + 1) * (1 + n))));
  }
}

TEST(CpuLogprobs, RejectsBadArgumentsNamingThem) {
  CpuBackend cpu;
  auto message = [&](Tensor values, Tensor ids, Tensor logits, Tensor chosen, int n) {
    try {
      cpu.logprobs(values, ids, logits, chosen, n);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::vector<float> five(10, 0.0f);
  const Tensor logits = cpu.upload(five.data(), DType::kF32, Shape{2, 5});
  const std::vector<int32_t> ok_ids = {0, 4};
  const Tensor chosen = cpu.upload(ok_ids.data(), DType::kI32, Shape{2});
  auto values = [&](int64_t cols) { return cpu.alloc(DType::kF32, Shape{2, cols}); };
  auto ids = [&](int64_t cols) { return cpu.alloc(DType::kI32, Shape{2, cols}); };
  EXPECT_EQ(message(values(4), ids(3), logits, chosen, 3), "no error");
  EXPECT_EQ(message(values(1), ids(0), logits, chosen, 0), "no error");
  EXPECT_EQ(message(values(6), ids(5), logits, chosen, 5), "no error");  // n = V
  EXPECT_NE(message(values(7), ids(6), logits, chosen, 6).find("n must be"), std::string::npos);  // n > V
  EXPECT_NE(message(values(0), ids(0), logits, chosen, -1).find("n must be"), std::string::npos);
  EXPECT_NE(message(values(4), ids(3), cpu.alloc(DType::kBF16, Shape{2, 5}), chosen, 3).find("logits"),
            std::string::npos);
  EXPECT_NE(message(values(4), ids(3), cpu.alloc(DType::kF32, Shape{10}), chosen, 3).find("logits"), std::string::npos);
  EXPECT_NE(message(values(3), ids(3), logits, chosen, 3).find("out_values"), std::string::npos);
  EXPECT_NE(message(values(4), ids(2), logits, chosen, 3).find("out_ids"), std::string::npos);
  const Tensor f32_ids = cpu.alloc(DType::kF32, Shape{2, 3});
  EXPECT_NE(message(values(4), f32_ids, logits, chosen, 3).find("out_ids"), std::string::npos);
  const Tensor three = cpu.alloc(DType::kI32, Shape{3});
  EXPECT_NE(message(values(4), ids(3), logits, three, 3).find("chosen_ids"), std::string::npos);
  const std::vector<int32_t> bad_ids = {0, 5};
  const std::string bad = message(values(4), ids(3), logits, cpu.upload(bad_ids.data(), DType::kI32, Shape{2}), 3);
  EXPECT_NE(bad.find("chosen id 5 of row 1"), std::string::npos) << bad;
  // n above kMaxLogprobs, on a vocabulary large enough for it.
  const Tensor wide = cpu.alloc(DType::kF32, Shape{2, 64});
  EXPECT_NE(message(values(kMaxLogprobs + 2), ids(kMaxLogprobs + 1), wide, chosen, kMaxLogprobs + 1).find("n must be"),
            std::string::npos);
  EXPECT_EQ(message(values(kMaxLogprobs + 1), ids(kMaxLogprobs), wide, chosen, kMaxLogprobs), "no error");
}

}  // namespace
}  // namespace tide
