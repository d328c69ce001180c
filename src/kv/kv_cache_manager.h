// KvCacheManager: the window-aware paged KV cache of docs/design/kv-cache.md. One BlockPool (the arena) serves
// every layer group; each sequence has a block table per group indexed by position / block_size (no cyclic
// buffers).
// - A sliding group lets go of a block as soon as no token the sequence will still compute can read it;
//   the table entry becomes kNullBlock.
// - Full blocks are registered under a hash-chain key; released blocks stay cached until evicted (then
//   copied to the host tier when there is one).
// - Prefix reuse: a new prompt of T tokens reuses the largest block-aligned L <= T - 1 that every group can
//   serve: global groups need blocks 0 .. L/B - 1, sliding groups only the blocks overlapping the last window
//   before L. Shared blocks are refcounted and never written (sequences only write positions >= L).
// Pure host code: memory and copies are the caller's (BlockCopy lists, executed before the next step).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kv/block_key.h"
#include "kv/block_pool.h"

namespace tide {

// The arena's size in blocks (every group's block has the same byte size).
struct KvArenaSpec {
  int32_t num_blocks = 0;
  int32_t num_host_blocks = 0;  // host tier slots (0: no host tier)
};

// The KV state of one sequence.
struct SequenceKv {
  std::vector<std::vector<int32_t>> block_tables;  // [group][logical block]; kNullBlock where not held
  std::vector<int64_t> first_held_block;           // [group]: logical blocks before it are all null
  std::vector<int32_t> tokens;                     // tokens whose K/V are computed (positions 0 .. n-1)
  std::vector<BlockKey> block_keys;                // keys of the full blocks among them
  int64_t num_cached_tokens = 0;                   // prefix taken from the cache when admitted

  int64_t num_computed() const { return static_cast<int64_t>(tokens.size()); }
  // Logical blocks in every group's table (they all have the same length).
  int64_t num_table_blocks() const { return block_tables.empty() ? 0 : static_cast<int64_t>(block_tables.front().size()); }
};

class KvCacheManager {
 public:
  // group_windows[g]: layer group g's window (0: global). extra_key: everything besides tokens that decides
  // KV content (it seeds every key chain).
  KvCacheManager(int64_t block_size, std::vector<int64_t> group_windows, KvArenaSpec arena,
                 bool enable_prefix_caching, uint64_t extra_key = 0);
  // A manager over groups [first_group, first_group + group_windows.size()) of `pool`, an arena other managers
  // may draw from too (a draft model's KV cache beside the model's): every free block serves whichever
  // manager allocates first. Their windows must match the pool's; their keys must differ from the other
  // managers' (another extra_key), so that one manager's blocks never serve another's hits and what one loses
  // never drops another's keys. `block_size` is this manager's (positions per block; the bytes are the pool's).
  KvCacheManager(int64_t block_size, std::vector<int64_t> group_windows, std::shared_ptr<BlockPool> pool,
                 int first_group, bool enable_prefix_caching, uint64_t extra_key);

  // A copy has a copy of the arena of its own (a snapshot: what it does never reaches the original's arena).
  KvCacheManager(const KvCacheManager& other);
  KvCacheManager& operator=(const KvCacheManager& other);
  KvCacheManager(KvCacheManager&&) noexcept = default;
  KvCacheManager& operator=(KvCacheManager&&) noexcept = default;

  int64_t block_size() const { return block_size_; }
  int num_groups() const { return static_cast<int>(windows_.size()); }
  int64_t window(int group) const { return windows_[static_cast<size_t>(group)]; }
  // The arena; this manager's group g is the pool's group first_group() + g.
  const BlockPool& pool() const { return *pool_; }
  const std::shared_ptr<BlockPool>& shared_pool() const { return pool_; }
  int first_group() const { return base_; }
  bool prefix_caching() const { return prefix_caching_; }

  // Most blocks group `g` holds at once for one sequence of `num_tokens` positions computed in chunks of at
  // most `chunk` tokens. Does not mutate.
  int64_t max_blocks_per_sequence(int g, int64_t num_tokens, int64_t chunk) const;
  // The same summed over the groups: what the arena must hold for such a sequence alone. Does not mutate.
  int64_t max_arena_blocks(int64_t num_tokens, int64_t chunk) const;
  // Whether the arena could hold one such sequence if nothing else held blocks. Does not mutate.
  bool fits(int64_t num_tokens, int64_t chunk) const;

  // The reuse rule: the largest block-aligned L <= T - 1 every group can serve (0 without prefix caching).
  // Does not mutate.
  int64_t num_reusable_tokens(std::span<const int32_t> prompt) const;
  // Starts a fresh `seq` on `prompt`: takes the reusable prefix (references on device blocks, copies back
  // from the host tier), fills the tables and counts lookups. Returns L = seq.num_cached_tokens; the caller
  // computes tokens L .. T-1. Throws tide::Error (changing nothing) when the arena has no free block for the
  // copies back. `reuse_prefix` false: L = 0 (every position is computed, e.g. for its logits).
  int64_t admit(SequenceKv& seq, std::span<const int32_t> prompt, bool reuse_prefix = true);

  // Whether the arena has the free blocks to give positions [n, n + num_new_tokens) memory in every group.
  // No mutation.
  bool can_append(const SequenceKv& seq, int64_t num_new_tokens) const;
  // The most tokens, at most `max_new_tokens`, that append(seq, ·) can give blocks in every group now
  // (0 when not even one fits). Equals the largest n <= max_new_tokens with can_append(seq, n). With
  // `keep_free`, as if that many fewer blocks were free (what a draft's cache leaves the model). No mutation.
  int64_t num_appendable_tokens(const SequenceKv& seq, int64_t max_new_tokens, int64_t keep_free = 0) const;
  // For a fresh sequence on `prompt` (T tokens, L = num_reusable_tokens(prompt)): the most tokens, at most
  // min(max_new_tokens, T - L), that admit(prompt) followed by append could give blocks now; 0 when admit
  // itself has no room (copies back from the host tier need free blocks). Lets a scheduler decide before
  // admitting, so a refused admission leaves no trace in the LRU order or the hit counts. No mutation.
  int64_t num_admissible_tokens(std::span<const int32_t> prompt, int64_t max_new_tokens, bool reuse_prefix = true) const;
  // Gives positions [n, n + num_new_tokens) blocks in every group (n = seq.num_computed()). Throws tide::Error,
  // changing nothing, when the arena does not have them (can_append).
  void append(SequenceKv& seq, int64_t num_new_tokens);
  // Records that `tokens` (positions n .. n + size - 1, appended before) are computed: full blocks get their
  // keys registered, and sliding blocks no later token of the sequence reads are released.
  void commit(SequenceKv& seq, std::span<const int32_t> tokens);
  // Undoes the appends since the last commit: blocks past the computed positions go back (a step that did
  // not run).
  void truncate(SequenceKv& seq);
  // Releases every block of `seq` (registered ones stay cached) and resets it. The end of each chain goes
  // to the free queue first, every group's block of a position together, so eviction takes a prefix from
  // its tail in all groups at once.
  void free(SequenceKv& seq);

  // Copies the caller must execute, in order, before the next forward step; empties the list.
  std::vector<BlockCopy> take_copies();

  // Throws when refcounts do not equal the references held by `live` sequences (blocks of this manager's
  // groups, or referenced by them), or the arena's own invariants are broken. For tests.
  void check_invariants(std::span<const SequenceKv* const> live) const;

 private:
  int64_t blocks_for(int64_t num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }
  // First logical block a token at `pos` reads in group `g`.
  int64_t first_block_read(int g, int64_t pos) const;
  std::vector<BlockKey> prompt_keys(std::span<const int32_t> prompt, int64_t num_blocks) const;
  // The keys each group needs for a hit of `num_hit_blocks` blocks (global: all, sliding: the last window).
  std::vector<BlockPool::GroupKeys> hit_keys(std::span<const BlockKey> keys, int64_t num_hit_blocks) const;
  void release_out_of_window(SequenceKv& seq);

  int64_t block_size_;
  std::vector<int64_t> windows_;
  std::vector<int> registration_order_;  // global groups first (BlockPool::register_key)
  std::shared_ptr<BlockPool> pool_;
  int base_ = 0;  // this manager's first group in pool_
  std::vector<BlockCopy> copies_;
  bool prefix_caching_;
  BlockKey root_key_;
};

}  // namespace tide
