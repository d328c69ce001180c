// CompiledGrammar: a Grammar compiled against a vocabulary, shared by every request that uses it (all methods
// are thread-safe). It holds the byte-level network and two caches that make token masks cheap:
//
// - Per grammar position (a ready node), the vocabulary classified once, the first time a stack's top is
//   there: tokens accepted whatever lies below the top frame, tokens rejected whatever lies below, and the
//   context-dependent rest (tokens that complete the top rule and go on into its caller). The classification
//   walks the vocabulary in sorted order, so a shared prefix is matched once, and skips every token under a
//   prefix that died.
// - Per full matcher state (the canonical set of stacks), the finished mask: a state seen before, by this
//   request or another, costs a copy.
//
// A mask for a state not seen before is the union of its top nodes' accepted sets, plus the context-dependent
// tokens of those nodes checked against the whole state.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/byte_grammar.h"
#include "grammar/grammar.h"
#include "grammar/stack_set.h"
#include "grammar/vocabulary.h"

namespace tide::grammar {

struct CompileOptions {
  // Memory for cached full-state masks; when it is full the cache starts over. 0: no full-state cache.
  size_t mask_cache_bytes = 256u << 20;
};

class CompiledGrammar {
 public:
  // Throws GrammarError for a grammar the engine refuses.
  CompiledGrammar(const Grammar& grammar, std::shared_ptr<const TokenVocabulary> vocabulary, CompileOptions options = {});

  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  const std::shared_ptr<const TokenVocabulary>& vocabulary_ptr() const { return vocabulary_; }
  const detail::ByteGrammar& byte_grammar() const { return bytes_; }

  // The mask of `state` (`key` is state.key()) into bits (at least vocabulary().mask_words() words).
  void fill_mask(const detail::StackSet& state, const std::string& key, std::span<uint32_t> bits) const;

  struct Stats {
    uint64_t nodes_classified = 0;  // grammar positions whose vocabulary classification was computed
    uint64_t mask_cache_hits = 0;
    uint64_t mask_cache_misses = 0;
    uint64_t context_checks = 0;  // context-dependent tokens checked against a full state
  };
  Stats stats() const;

 private:
  // The classification of the vocabulary at one ready node (see the file comment).
  struct NodeTokens {
    std::vector<uint32_t> accepted_bits;  // a full bitset over ids, or empty when accepted_ids is used
    std::vector<int32_t> accepted_ids;
    std::vector<uint32_t> context_dependent;  // indices into the vocabulary's sorted strings, ascending
  };
  std::shared_ptr<const NodeTokens> node_tokens(int32_t node) const;
  NodeTokens classify(int32_t node) const;
  // Sets the bits of the strings among `candidates` (ascending sorted-string indices) that `state` accepts.
  void check_candidates(const detail::StackSet& state, std::span<const uint32_t> candidates,
                        std::span<uint32_t> bits) const;

  std::shared_ptr<const TokenVocabulary> vocabulary_;
  detail::ByteGrammar bytes_;
  CompileOptions options_;

  mutable std::shared_mutex nodes_mutex_;
  mutable std::unordered_map<int32_t, std::shared_ptr<const NodeTokens>> nodes_;
  mutable std::shared_mutex masks_mutex_;
  mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<uint32_t>>> masks_;
  mutable size_t mask_bytes_ = 0;
  mutable std::atomic<uint64_t> nodes_classified_{0}, hits_{0}, misses_{0}, context_checks_{0};
};

// Compiles `grammar` for `vocabulary` (a shorthand for make_shared<CompiledGrammar>).
std::shared_ptr<const CompiledGrammar> compile(const Grammar& grammar,
                                               std::shared_ptr<const TokenVocabulary> vocabulary,
                                               CompileOptions options = {});

}  // namespace tide::grammar
