// Prompt-lookup drafting (spec/ngram_index.h) against a brute-force search on random sequences over small
// alphabets (so that suffixes recur), at every length, for several n ranges and draft lengths; plus the cases a
// reader would check by hand and the refusals of bad bounds.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <vector>

#include "spec/ngram_index.h"

namespace tide::spec {
namespace {

// What followed the latest earlier occurrence of the longest suffix of n in [min_n, max_n] tokens.
std::vector<int32_t> brute_force(const std::vector<int32_t>& t, int min_n, int max_n, int k) {
  const int size = static_cast<int>(t.size());
  for (int n = max_n; n >= min_n; --n) {
    if (n > size) continue;
    for (int end = size - 1; end >= n; --end) {  // an occurrence [end - n, end) with a successor at `end`
      bool match = true;
      for (int i = 1; i <= n && match; ++i) match = t[end - i] == t[size - i];
      if (match) return std::vector<int32_t>(t.begin() + end, t.begin() + std::min(size, end + k));
    }
  }
  return {};
}

TEST(NgramIndex, MatchesABruteForceSearchAtEveryLength) {
  std::mt19937 rng(7);
  for (const auto [min_n, max_n] : {std::pair{1, 1}, {1, 3}, {2, 4}, {3, 3}, {2, 8}}) {
    for (const int alphabet : {2, 3, 6}) {
      for (const int k : {1, 3, 6}) {
        NgramIndex index(min_n, max_n);
        std::vector<int32_t> tokens;
        std::uniform_int_distribution<int32_t> pick(0, alphabet - 1);
        for (int i = 0; i < 300; ++i) {
          const int32_t token = pick(rng) * 1000 + 5;
          tokens.push_back(token);
          index.append(token);
          ASSERT_EQ(index.propose(k), brute_force(tokens, min_n, max_n, k))
              << "n " << min_n << ".." << max_n << " alphabet " << alphabet << " k " << k << " length " << i + 1;
        }
      }
    }
  }
}

TEST(NgramIndex, CopiesWhatFollowedTheLatestOccurrenceOfTheLongestSuffix) {
  NgramIndex index(2, 4);
  // "1 2 3 4 5 | 9 2 3 7 | 1 2 3": the suffix "1 2 3" occurred at the start (followed by 4 5 ...); "2 3" alone
  // occurred later (followed by 7), but the longer match wins.
  index.append(std::vector<int32_t>{1, 2, 3, 4, 5, 9, 2, 3, 7, 1, 2, 3});
  EXPECT_EQ(index.propose(3), (std::vector<int32_t>{4, 5, 9}));
  EXPECT_EQ(index.propose(1), (std::vector<int32_t>{4}));
  index.append(8);  // "2 3 8" never occurred, nor "3 8": nothing
  EXPECT_TRUE(index.propose(4).empty());
  EXPECT_TRUE(index.propose(0).empty());
}

TEST(NgramIndex, ADraftStopsAtTheEndOfTheSequence) {
  NgramIndex index(1, 2);
  index.append(std::vector<int32_t>{4, 4, 4});  // "4 4" occurred at [0, 2): one token follows it
  EXPECT_EQ(index.propose(5), (std::vector<int32_t>{4}));
}

TEST(NgramIndex, RefusesBadBoundsNamingThem) {
  EXPECT_THROW(NgramIndex(0, 2), std::invalid_argument);
  EXPECT_THROW(NgramIndex(3, 2), std::invalid_argument);
  EXPECT_THROW(NgramIndex(1, NgramIndex::kMaxN + 1), std::invalid_argument);
  try {
    NgramIndex(3, 2);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("prompt_lookup_max"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tide::spec
