// Prompt-lookup drafting (n-gram speculation): the draft for a sequence is what followed the latest earlier
// occurrence of its current suffix, the longest suffix of n in [min_n, max_n] tokens that occurred before.
// Retrieval-augmented answers and code edits copy long spans of their prompt, so the drafts come without a
// second model.
//
// NgramIndex is fed a sequence's tokens one by one (prompt, then each accepted output token; drafts that were
// rejected never reach it) and keeps, for every n, a hash map from an n-gram to the position that followed its
// latest occurrence: appending is O(max_n^2), proposing O(max_n^2 + k), whatever the sequence's length, so a
// 256K-token prompt costs no per-step scan. A hash collision is caught by comparing the tokens (that n then
// proposes nothing).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace tide::spec {

class NgramIndex {
 public:
  // 1 <= min_n <= max_n <= kMaxN; throws std::invalid_argument naming prompt_lookup_min / prompt_lookup_max.
  NgramIndex(int min_n, int max_n);

  static constexpr int kMaxN = 64;

  void append(int32_t token);
  void append(std::span<const int32_t> tokens);

  // Up to k tokens that followed the latest earlier occurrence of the longest matching suffix (n from max_n
  // down to min_n); empty when no suffix of at least min_n tokens occurred before.
  std::vector<int32_t> propose(int k) const;

  size_t size() const { return tokens_.size(); }
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  uint64_t hash_at(size_t end, int n) const;  // the n tokens ending before `end`
  bool same(size_t end_a, size_t end_b, int n) const;

  int min_n_, max_n_;
  std::vector<int32_t> tokens_;
  // maps_[n - min_n_]: n-gram hash -> the position right after its latest occurrence that has a successor.
  std::vector<std::unordered_map<uint64_t, uint32_t>> maps_;
};

}  // namespace tide::spec
