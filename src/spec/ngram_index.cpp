#include "spec/ngram_index.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tide::spec {

NgramIndex::NgramIndex(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {
  if (min_n < 1 || min_n > kMaxN) {
    throw std::invalid_argument("prompt_lookup_min must be in [1, " + std::to_string(kMaxN) + "], got " +
                                std::to_string(min_n));
  }
  if (max_n < min_n || max_n > kMaxN) {
    throw std::invalid_argument("prompt_lookup_max must be in [prompt_lookup_min (" + std::to_string(min_n) + "), " +
                                std::to_string(kMaxN) + "], got " + std::to_string(max_n));
  }
  maps_.resize(static_cast<size_t>(max_n - min_n + 1));
}

uint64_t NgramIndex::hash_at(size_t end, int n) const {
  // FNV-1a over the token values: collisions only cost a comparison.
  uint64_t h = 1469598103934665603ull ^ static_cast<uint64_t>(n);
  for (size_t i = end - static_cast<size_t>(n); i < end; ++i) {
    h ^= static_cast<uint32_t>(tokens_[i]);
    h *= 1099511628211ull;
  }
  return h;
}

bool NgramIndex::same(size_t end_a, size_t end_b, int n) const {
  for (int i = 1; i <= n; ++i) {
    if (tokens_[end_a - static_cast<size_t>(i)] != tokens_[end_b - static_cast<size_t>(i)]) return false;
  }
  return true;
}

void NgramIndex::append(int32_t token) {
  tokens_.push_back(token);
  // The n-grams ending just before the new token now have a successor: record where it is. The n-gram ending at
  // the new token has none yet, so the current suffix never matches itself.
  const size_t end = tokens_.size() - 1;
  for (int n = min_n_; n <= max_n_ && static_cast<size_t>(n) <= end; ++n) {
    maps_[static_cast<size_t>(n - min_n_)][hash_at(end, n)] = static_cast<uint32_t>(end);
  }
}

void NgramIndex::append(std::span<const int32_t> tokens) {
  tokens_.reserve(tokens_.size() + tokens.size());
  for (const int32_t t : tokens) append(t);
}

std::vector<int32_t> NgramIndex::propose(int k) const {
  const size_t size = tokens_.size();
  if (k <= 0) return {};
  for (int n = max_n_; n >= min_n_; --n) {
    if (static_cast<size_t>(n) > size) continue;
    const auto& map = maps_[static_cast<size_t>(n - min_n_)];
    const auto it = map.find(hash_at(size, n));
    if (it == map.end() || !same(it->second, size, n)) continue;
    const size_t from = it->second;
    const size_t to = std::min(size, from + static_cast<size_t>(k));
    return std::vector<int32_t>(tokens_.begin() + static_cast<std::ptrdiff_t>(from),
                                tokens_.begin() + static_cast<std::ptrdiff_t>(to));
  }
  return {};
}

}  // namespace tide::spec
