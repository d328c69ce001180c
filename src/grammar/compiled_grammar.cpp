#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <cstring>

#include "grammar/walk_cache.h"

namespace tide::grammar {

namespace {

// Per-thread scratch: one stack set per depth of the token walk, reused so that the walks allocate nothing
// once warm.
std::vector<detail::StackSet>& walk_states(size_t depth) {
  thread_local std::vector<detail::StackSet> states;
  if (states.size() < depth) states.resize(depth);
  return states;
}

void set_ids(std::span<const int32_t> ids, std::span<uint32_t> bits) {
  for (const int32_t id : ids) bits[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
}

}  // namespace

CompiledGrammar::CompiledGrammar(const Grammar& grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
                                 CompileOptions options)
    : vocabulary_(std::move(vocabulary)), bytes_(grammar), options_(options) {
  if (!vocabulary_) throw GrammarError("CompiledGrammar: no vocabulary");
}

std::shared_ptr<const CompiledGrammar> compile(const Grammar& grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
                                               CompileOptions options) {
  return std::make_shared<const CompiledGrammar>(grammar, std::move(vocabulary), options);
}

CompiledGrammar::Stats CompiledGrammar::stats() const {
  return {nodes_classified_.load(), hits_.load(), misses_.load(), context_checks_.load()};
}

std::shared_ptr<const CompiledGrammar::NodeTokens> CompiledGrammar::node_tokens(int32_t node) const {
  {
    std::shared_lock lock(nodes_mutex_);
    if (const auto it = nodes_.find(node); it != nodes_.end()) return it->second;
  }
  // Computed outside the lock; two threads may both compute a node, the first insert wins.
  auto computed = std::make_shared<const NodeTokens>(classify(node));
  nodes_classified_.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock lock(nodes_mutex_);
  return nodes_.try_emplace(node, std::move(computed)).first->second;
}

// Walks the sorted vocabulary from the single stack [node], whose bottom stands for the unknown context: a
// completion of node's rule below it ("end" in the walk), followed by a byte that may follow the rule
// (ByteGrammar::may_follow), marks the tokens going on that way as context-dependent. A completion at depth 0
// is not counted: the matcher's state already holds the stacks that the node's completion leads to.
// Per token: accepted if some path consumed all its bytes (above the bottom, or completing exactly at its
// end); else context-dependent if a path completed the rule with a following byte left; else rejected. A
// prefix with no stack left settles every token below it at once (by next byte where the rule completed
// there).
CompiledGrammar::NodeTokens CompiledGrammar::classify(int32_t node) const {
  const TokenVocabulary& v = *vocabulary_;
  const size_t max_len = v.max_token_length();
  detail::WalkCache cache(bytes_);
  detail::StackSet start;
  start.add({}, {}, node);
  std::vector<int32_t> st(max_len + 1);  // state ids along the current prefix
  // context[d]: along the current prefix, a completion at some depth j in [1, d) was followed by s[j], a byte
  // that may follow the rule.
  std::vector<char> context(max_len + 2, 0);
  st[0] = cache.intern(start);
  NodeTokens out;
  std::vector<int32_t> accepted;
  size_t valid = 0;  // st[0..valid] and context[0..valid] belong to the current token's prefix
  const size_t n = v.string_count();
  const auto completes_into = [&](size_t d, char next) {
    return d > 0 && cache.has_end(st[d]) && bytes_.may_follow(node, static_cast<uint8_t>(next));
  };
  for (size_t i = 0; i < n;) {
    const std::string_view s = v.string(i);
    valid = std::min<size_t>(valid, v.common_prefix(i));
    size_t d = valid;
    bool full = false;
    while (d < s.size() && cache.ready(st[d])) {
      const int32_t next = cache.step(st[d], static_cast<uint8_t>(s[d]));
      if (next == detail::WalkCache::kFull) {
        full = true;
        break;
      }
      st[d + 1] = next;
      context[d + 1] = static_cast<char>(context[d] || completes_into(d, s[d]));
      ++d;
    }
    if (full) {  // start this token over with an empty cache
      cache.clear();
      st[0] = cache.intern(start);
      valid = 0;
      continue;
    }
    valid = d;
    if (d == s.size()) {
      if (!cache.dead(st[d])) {
        const auto ids = v.ids_of(i);
        accepted.insert(accepted.end(), ids.begin(), ids.end());
      } else if (context[d]) {
        out.context_dependent.push_back(static_cast<uint32_t>(i));
      }
      ++i;
      continue;
    }
    // No stack left after s[0..d): every token with this prefix and the same next byte ends alike.
    const size_t j = cache.has_end(st[d]) ? v.subtree_end(i, d) : v.subtree_end(i, d - 1);  // d >= 1
    if (context[d] || completes_into(d, s[d])) {
      for (size_t k = i; k < j; ++k) out.context_dependent.push_back(static_cast<uint32_t>(k));
    }
    i = j;
  }
  if (accepted.size() > v.mask_words()) {
    out.accepted_bits.assign(v.mask_words(), 0);
    set_ids(accepted, out.accepted_bits);
  } else {
    out.accepted_ids = std::move(accepted);
  }
  return out;
}

void CompiledGrammar::check_candidates(const detail::StackSet& state, std::span<const uint32_t> candidates,
                                       std::span<uint32_t> bits) const {
  if (candidates.empty()) return;
  const TokenVocabulary& v = *vocabulary_;
  std::vector<detail::StackSet>& st = walk_states(v.max_token_length() + 1);
  st[0] = state;
  std::string_view prev;
  size_t valid = 0;
  for (const uint32_t idx : candidates) {
    const std::string_view s = v.string(idx);
    size_t common = 0;
    const size_t bound = std::min({valid, prev.size(), s.size()});
    while (common < bound && prev[common] == s[common]) ++common;
    size_t d = common;
    while (d < s.size() && st[d].count() > 0) {
      detail::step(bytes_, st[d], static_cast<uint8_t>(s[d]), st[d + 1]);
      ++d;
    }
    valid = d;
    prev = s;
    if (d == s.size() && !st[d].dead()) set_ids(v.ids_of(idx), bits);
  }
  context_checks_.fetch_add(candidates.size(), std::memory_order_relaxed);
}

void CompiledGrammar::fill_mask(const detail::StackSet& state, const std::string& key, std::span<uint32_t> bits) const {
  const TokenVocabulary& v = *vocabulary_;
  const size_t words = v.mask_words();
  if (bits.size() < words) throw GrammarError("fill_mask: the mask has fewer words than the vocabulary needs");
  {
    std::shared_lock lock(masks_mutex_);
    if (const auto it = masks_.find(key); it != masks_.end()) {
      std::memcpy(bits.data(), it->second->data(), words * sizeof(uint32_t));
      std::fill(bits.begin() + static_cast<std::ptrdiff_t>(words), bits.end(), 0u);
      hits_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  std::fill(bits.begin(), bits.end(), 0u);
  std::vector<int32_t> tops;
  for (uint32_t i = 0; i < state.count(); ++i) tops.push_back(state.top(i));
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  std::vector<uint32_t> candidates;
  for (const int32_t top : tops) {
    const std::shared_ptr<const NodeTokens> nt = node_tokens(top);
    if (!nt->accepted_bits.empty()) {
      for (size_t w = 0; w < words; ++w) bits[w] |= nt->accepted_bits[w];
    } else {
      set_ids(nt->accepted_ids, bits);
    }
    candidates.insert(candidates.end(), nt->context_dependent.begin(), nt->context_dependent.end());
  }
  if (tops.size() > 1) {
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  }
  // A token some top already accepts needs no check.
  candidates.erase(std::remove_if(candidates.begin(), candidates.end(),
                                  [&](uint32_t idx) {
                                    const int32_t id = v.ids_of(idx)[0];
                                    return (bits[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u;
                                  }),
                   candidates.end());
  check_candidates(state, candidates, bits);
  if (state.has_end()) set_ids(v.stop_ids(), bits);

  const size_t bytes = words * sizeof(uint32_t) + key.size();
  if (bytes > options_.mask_cache_bytes) return;  // caching off (or a mask larger than the whole budget)
  auto mask = std::make_shared<const std::vector<uint32_t>>(bits.begin(), bits.begin() + static_cast<std::ptrdiff_t>(words));
  std::unique_lock lock(masks_mutex_);
  if (mask_bytes_ + bytes > options_.mask_cache_bytes) {
    masks_.clear();
    mask_bytes_ = 0;
  }
  if (masks_.try_emplace(key, std::move(mask)).second) mask_bytes_ += bytes;
}

}  // namespace tide::grammar
