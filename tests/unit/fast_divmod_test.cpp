// FastDivmod (backend/fast_divmod.h), the division by the block size the attention kernels' K/V copies run,
// against the / operator: every divisor up to 4096 over the keys of a 256K context and the ends of the range
// of numerators, powers of two and their neighbours up to 2^31 - 1, and random pairs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/fast_divmod.h"

namespace tide {
namespace {

// Counts the numerators that FastDivmod gets wrong (a gtest assertion per pair would be most of the test's time).
struct Checker {
  int64_t checked = 0, wrong = 0;
  uint32_t first_n = 0, first_d = 0;
  void operator()(const FastDivmod& f, uint32_t n) {
    const uint32_t q = f.div(n);
    ++checked;
    if (q != n / f.divisor || f.mod(n, q) != n % f.divisor) {
      if (wrong++ == 0) first_n = n, first_d = f.divisor;
    }
  }
  void expect_none_wrong() const {
    EXPECT_GT(checked, 0);
    EXPECT_EQ(wrong, 0) << "first: " << first_n << " / " << first_d;
  }
};

TEST(FastDivmod, SmallDivisorsOverAContextAndTheRangeEnds) {
  constexpr uint32_t kTop = (uint32_t{1} << 31) - 1;
  Checker check;
  for (uint32_t d = 1; d <= 4096; ++d) {
    const FastDivmod f = FastDivmod::make(d);
    for (uint32_t n = 0; n < 262144; n += (d <= 64 ? 1 : 97)) check(f, n);
    for (uint32_t n = kTop - 3 * d; n < kTop; ++n) check(f, n);
    check(f, kTop);
  }
  check.expect_none_wrong();
}

TEST(FastDivmod, PowersOfTwoAndTheirNeighbours) {
  std::vector<uint32_t> divisors;
  for (uint32_t s = 0; s < 31; ++s) {
    const uint32_t p = uint32_t{1} << s;
    for (uint32_t d : {p - 1, p, p + 1}) {
      if (d >= 1 && d < (uint32_t{1} << 31)) divisors.push_back(d);
    }
  }
  divisors.push_back((uint32_t{1} << 31) - 1);
  std::vector<uint32_t> numerators;
  for (uint32_t s = 0; s < 31; ++s) {
    const uint32_t p = uint32_t{1} << s;
    for (uint32_t n : {p - 1, p, p + 1}) numerators.push_back(n & 0x7FFFFFFFu);
  }
  numerators.push_back((uint32_t{1} << 31) - 1);
  Checker check;
  for (uint32_t d : divisors) {
    const FastDivmod f = FastDivmod::make(d);
    for (uint32_t n : numerators) check(f, n);
    for (uint64_t k : {1u, 2u, 3u, 1000u, 1u << 20}) {  // multiples of d and their neighbours
      const uint64_t m = uint64_t{d} * k;
      for (uint64_t x : {m - 1, m, m + 1}) {
        if (x < (uint64_t{1} << 31)) check(f, static_cast<uint32_t>(x));
      }
    }
  }
  check.expect_none_wrong();
}

TEST(FastDivmod, RandomPairs) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any(0, (uint32_t{1} << 31) - 1);
  Checker check;
  for (int i = 0; i < 200000; ++i) {
    const uint32_t d = std::max<uint32_t>(1, any(rng) >> (i % 31));
    check(FastDivmod::make(d), any(rng));
  }
  check.expect_none_wrong();
}

}  // namespace
}  // namespace tide
