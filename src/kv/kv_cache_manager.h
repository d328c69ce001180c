// KvCacheManager: the window-aware paged KV cache of design/kv-cache.md. One BlockPool per layer group
// (window); each sequence has a block table per pool indexed by position / block_size (no cyclic buffers).
// - A sliding pool lets go of a block as soon as no token the sequence will still compute can read it;
//   the table entry becomes kNullBlock.
// - Full blocks are registered under a hash-chain key; released blocks stay cached until evicted (then
//   copied to the host tier when there is one).
// - Prefix reuse: a new prompt of T tokens reuses the largest block-aligned L <= T - 1 that every pool can
//   serve: global pools need blocks 0 .. L/B - 1, sliding pools only the blocks overlapping the last window
//   before L. Shared blocks are refcounted and never written (sequences only write positions >= L).
// Pure host code: memory and copies are the caller's (BlockCopy lists, executed before the next step).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kv/block_key.h"
#include "kv/block_pool.h"

namespace tide {

struct PoolSpec {
  int64_t window = 0;  // 0: global
  int32_t num_blocks = 0;
  int32_t num_host_blocks = 0;
};

// The KV state of one sequence.
struct SequenceKv {
  std::vector<std::vector<int32_t>> block_tables;  // [pool][logical block]; kNullBlock where not held
  std::vector<int64_t> first_held_block;           // [pool]: logical blocks before it are all null
  std::vector<int32_t> tokens;                     // tokens whose K/V are computed (positions 0 .. n-1)
  std::vector<BlockKey> block_keys;                // keys of the full blocks among them
  int64_t num_cached_tokens = 0;                   // prefix taken from the cache when admitted

  int64_t num_computed() const { return static_cast<int64_t>(tokens.size()); }
};

class KvCacheManager {
 public:
  // extra_key: everything besides tokens that decides KV content (it seeds every key chain).
  KvCacheManager(int64_t block_size, std::vector<PoolSpec> pools, bool enable_prefix_caching,
                 uint64_t extra_key = 0);

  int64_t block_size() const { return block_size_; }
  int num_pools() const { return static_cast<int>(pools_.size()); }
  const BlockPool& pool(int i) const { return pools_[static_cast<size_t>(i)]; }
  const PoolSpec& spec(int i) const { return specs_[static_cast<size_t>(i)]; }
  bool prefix_caching() const { return prefix_caching_; }

  // Most blocks pool `i` holds at once for one sequence of `num_tokens` positions computed in chunks of at
  // most `chunk` tokens. Does not mutate.
  int64_t max_blocks_per_sequence(int i, int64_t num_tokens, int64_t chunk) const;
  // Whether every pool could hold one such sequence if nothing else held blocks. Does not mutate.
  bool fits(int64_t num_tokens, int64_t chunk) const;

  // The reuse rule: the largest block-aligned L <= T - 1 every pool can serve (0 without prefix caching).
  // Does not mutate.
  int64_t num_reusable_tokens(std::span<const int32_t> prompt) const;
  // Starts a fresh `seq` on `prompt`: takes the reusable prefix (references on device blocks, copies back
  // from the host tier), fills the tables and counts lookups. Returns L = seq.num_cached_tokens; the caller
  // computes tokens L .. T-1. Throws tide::Error (changing nothing it cannot undo) when a pool is out of
  // blocks for the copies back.
  int64_t admit(SequenceKv& seq, std::span<const int32_t> prompt);

  // Whether every pool has the free blocks to give positions [n, n + num_new_tokens) memory. No mutation.
  bool can_append(const SequenceKv& seq, int64_t num_new_tokens) const;
  // The most tokens, at most `max_new_tokens`, that append(seq, ·) can give blocks in every pool now
  // (0 when not even one fits). Equals the largest n <= max_new_tokens with can_append(seq, n). No mutation.
  int64_t num_appendable_tokens(const SequenceKv& seq, int64_t max_new_tokens) const;
  // For a fresh sequence on `prompt` (T tokens, L = num_reusable_tokens(prompt)): the most tokens, at most
  // min(max_new_tokens, T - L), that admit(prompt) followed by append could give blocks in every pool now;
  // 0 when admit itself has no room (copies back from the host tier need free blocks). Lets a scheduler
  // decide before admitting, so a refused admission leaves no trace in the LRU order or the hit counts.
  // No mutation.
  int64_t num_admissible_tokens(std::span<const int32_t> prompt, int64_t max_new_tokens) const;
  // Gives positions [n, n + num_new_tokens) blocks in every pool (n = seq.num_computed()). Throws when a
  // pool is out of blocks; blocks taken before the throw stay in the table and go back with free().
  void append(SequenceKv& seq, int64_t num_new_tokens);
  // Records that `tokens` (positions n .. n + size - 1, appended before) are computed: full blocks get their
  // keys registered, and sliding blocks no later token of the sequence reads are released.
  void commit(SequenceKv& seq, std::span<const int32_t> tokens);
  // Releases every block of `seq` (registered ones stay cached) and resets it.
  void free(SequenceKv& seq);

  // Copies the caller must execute, in order, before the next forward step; empties the list.
  std::vector<BlockCopy> take_copies(int pool);

  // Throws when refcounts do not equal the references held by `live` sequences, or a pool's own invariants
  // are broken. For tests.
  void check_invariants(std::span<const SequenceKv* const> live) const;

 private:
  int64_t blocks_for(int64_t num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }
  // First logical block a token at `pos` reads in pool `i`.
  int64_t first_block_read(int i, int64_t pos) const;
  std::vector<BlockKey> prompt_keys(std::span<const int32_t> prompt, int64_t num_blocks) const;
  void release_out_of_window(SequenceKv& seq);

  int64_t block_size_;
  std::vector<PoolSpec> specs_;
  std::vector<BlockPool> pools_;
  std::vector<std::vector<BlockCopy>> copies_;  // [pool]
  bool prefix_caching_;
  BlockKey root_key_;
};

}  // namespace tide
