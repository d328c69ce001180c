#include "grammar/stack_set.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <numeric>

namespace tide::grammar::detail {

namespace {

inline uint64_t mix(uint64_t h, uint32_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xFF51AFD7ED558CCDull;
}

}  // namespace

void StackSet::add(std::span<const int32_t> base, std::span<const int32_t> pushes, int32_t ready) {
  const size_t depth = base.size() + pushes.size() + 1;
  if (depth > kMaxStackDepth) {
    throw GrammarError(fmt::format("grammar nesting exceeds {} levels", kMaxStackDepth));
  }
  const auto off = static_cast<uint32_t>(data_.size());
  data_.push_back(static_cast<int32_t>(depth));
  data_.insert(data_.end(), base.begin(), base.end());
  data_.insert(data_.end(), pushes.begin(), pushes.end());
  data_.push_back(ready);
  uint64_t h = depth;
  for (size_t k = off + 1; k < data_.size(); ++k) h = mix(h, static_cast<uint32_t>(data_[k]));
  for (size_t i = 0; i < hashes_.size(); ++i) {
    if (hashes_[i] != h) continue;
    const uint32_t other = offsets_[i];
    if (data_[other] == data_[off] &&
        std::memcmp(&data_[other + 1], &data_[off + 1], depth * sizeof(int32_t)) == 0) {
      data_.resize(off);
      return;
    }
  }
  if (offsets_.size() >= kMaxStacks) {
    throw GrammarError(fmt::format("grammar too ambiguous: more than {} parse stacks at once", kMaxStacks));
  }
  offsets_.push_back(off);
  hashes_.push_back(h);
}

std::string StackSet::key() const {
  std::vector<uint32_t> order(offsets_.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const auto sa = stack(a), sb = stack(b);
    return std::lexicographical_compare(sa.begin(), sa.end(), sb.begin(), sb.end());
  });
  std::string key;
  key.push_back(has_end_ ? 'E' : 'N');
  for (const uint32_t i : order) {
    const uint32_t off = offsets_[i];
    key.append(reinterpret_cast<const char*>(&data_[off]), (static_cast<size_t>(data_[off]) + 1) * sizeof(int32_t));
  }
  return key;
}

void enter(const ByteGrammar& g, std::span<const int32_t> base, int32_t node, StackSet& out) {
  while (true) {
    for (const Expansion& e : g.expansions(node)) out.add(base, g.pushes(e), e.ready);
    if (!g.can_return(node)) return;
    if (base.empty()) {
      out.set_end();
      return;
    }
    node = base.back();  // the rule completed: its caller goes on at the return node
    base = base.first(base.size() - 1);
  }
}

void initial_state(const ByteGrammar& g, StackSet& out) {
  out.clear();
  enter(g, {}, g.start_node(), out);
}

void step(const ByteGrammar& g, const StackSet& in, uint8_t byte, StackSet& out) {
  out.clear();
  for (uint32_t i = 0; i < in.count(); ++i) {
    const std::span<const int32_t> s = in.stack(i);
    const std::span<const int32_t> base = s.first(s.size() - 1);
    for (const ByteEdge& e : g.edges(s.back())) {
      if (byte < e.lo) break;  // edges are sorted by lo
      if (byte <= e.hi) enter(g, base, e.target, out);
    }
  }
}

}  // namespace tide::grammar::detail
