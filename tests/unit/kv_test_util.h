// Helpers shared by the KV cache manager tests: token builders, a driver for one sequence, and KvMemory,
// which simulates KV contents (the value at position p is a hash of the sequence's tokens 0..p) so tests
// check what a kernel would read, not only which block ids the tables hold.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "kv/kv_cache_manager.h"

namespace tide::test {

using Dir = BlockCopy::Direction;
using Tokens = std::vector<int32_t>;

// first, first + 1, ..., first + n - 1
inline Tokens make_tokens(int64_t n, int32_t first) {
  Tokens t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

inline Tokens concat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline Tokens head(const Tokens& t, int64_t n) { return Tokens(t.begin(), t.begin() + n); }

// Key of logical block j of `tokens` (extra key 0), computed independently of the manager.
inline BlockKey block_key(const Tokens& tokens, int64_t block_size, int64_t j) {
  BlockKey k = root_block_key(0);
  for (int64_t i = 0; i <= j; ++i) {
    k = chain_block_key(k, std::span<const int32_t>(tokens).subspan(static_cast<size_t>(i * block_size),
                                                                    static_cast<size_t>(block_size)));
  }
  return k;
}

inline int64_t num_held(const SequenceKv& seq, int g) {
  const auto& t = seq.block_tables[static_cast<size_t>(g)];
  return std::count_if(t.begin(), t.end(), [](int32_t b) { return b != kNullBlock; });
}

// Appends and commits `tokens` (the sequence's next positions) in chunks of at most `chunk`.
inline void compute(KvCacheManager& kv, SequenceKv& seq, const Tokens& tokens, int64_t chunk) {
  for (size_t i = 0; i < tokens.size(); i += static_cast<size_t>(chunk)) {
    const size_t c = std::min(tokens.size() - i, static_cast<size_t>(chunk));
    kv.append(seq, static_cast<int64_t>(c));
    kv.commit(seq, std::span<const int32_t>(tokens).subspan(i, c));
  }
}

// Admits `prompt` and computes what was not reused. Returns the reused length.
inline int64_t run_prompt(KvCacheManager& kv, SequenceKv& seq, const Tokens& prompt, int64_t chunk) {
  const int64_t reused = kv.admit(seq, prompt);
  compute(kv, seq, Tokens(prompt.begin() + reused, prompt.end()), chunk);
  return reused;
}

inline void check(const KvCacheManager& kv, std::vector<const SequenceKv*> live) {
  kv.check_invariants(std::span<const SequenceKv* const>(live));
}

// ---  simulated KV memory

// The K/V at position p of a sequence depend only on its tokens 0..p: the value "computed" there is a hash
// of that prefix.
inline std::vector<uint64_t> prefix_hashes(const Tokens& tokens) {
  std::vector<uint64_t> out;
  uint64_t h = 0x6b76636163686521ull;
  for (int32_t t : tokens) {
    h ^= static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    out.push_back(h | 1);  // never 0, the value of memory nobody wrote
  }
  return out;
}

// Device storage content[block][offset] of the arena and host storage host[slot][offset], driven only by
// the manager's tables and copy list, the way the engine drives real memory.
class KvMemory {
 public:
  explicit KvMemory(const KvCacheManager& kv)
      : block_size_(kv.block_size()),
        device_(static_cast<size_t>(kv.pool().num_blocks() * block_size_), 0),
        host_(static_cast<size_t>(kv.pool().num_host_blocks() * block_size_), 0) {}

  // Executes the pending copies, in order.
  void run_copies(KvCacheManager& kv) {
    for (const BlockCopy& c : kv.take_copies()) {
      uint64_t* dev = &device_[static_cast<size_t>(c.device_block * block_size_)];
      uint64_t* host = &host_[static_cast<size_t>(c.host_block * block_size_)];
      if (c.direction == Dir::kToHost) {
        std::copy(dev, dev + block_size_, host);
        ++num_to_host;
      } else {
        std::copy(host, host + block_size_, dev);
        ++num_to_device;
      }
    }
  }

  // Writes values[from .. to) at positions [from, to) of `seq` in every group. Only blocks the sequence owns
  // alone may be written (shared blocks are read-only).
  testing::AssertionResult write(const KvCacheManager& kv, const SequenceKv& seq, int64_t from, int64_t to,
                                 const std::vector<uint64_t>& values) {
    for (int g = 0; g < kv.num_groups(); ++g) {
      for (int64_t pos = from; pos < to; ++pos) {
        const auto& table = seq.block_tables[static_cast<size_t>(g)];
        const int64_t j = pos / block_size_;
        if (j >= static_cast<int64_t>(table.size()) || table[static_cast<size_t>(j)] == kNullBlock) {
          return testing::AssertionFailure() << "group " << g << ": position " << pos << " has no block to write";
        }
        const int32_t b = table[static_cast<size_t>(j)];
        if (kv.pool().refcount(b) != 1 || kv.pool().group_of(b) != g) {
          return testing::AssertionFailure() << "group " << g << ": position " << pos << " written into block " << b
                                             << " with refcount " << kv.pool().refcount(b) << " of group "
                                             << kv.pool().group_of(b);
        }
        at(b, pos) = values[static_cast<size_t>(pos)];
      }
    }
    return testing::AssertionSuccess();
  }

  // Whether positions [from, to) of `seq` in group g are in the table and hold values[from .. to).
  testing::AssertionResult holds(const SequenceKv& seq, int g, int64_t from, int64_t to,
                                 const std::vector<uint64_t>& values) {
    const auto& table = seq.block_tables[static_cast<size_t>(g)];
    for (int64_t pos = from; pos < to; ++pos) {
      const int64_t j = pos / block_size_;
      if (j >= static_cast<int64_t>(table.size()) || table[static_cast<size_t>(j)] == kNullBlock) {
        return testing::AssertionFailure() << "group " << g << ": position " << pos << " is read but not held";
      }
      const uint64_t got = at(table[static_cast<size_t>(j)], pos);
      if (got != values[static_cast<size_t>(pos)]) {
        return testing::AssertionFailure() << "group " << g << ": position " << pos << " (block "
                                           << table[static_cast<size_t>(j)] << ") holds " << got << ", expected "
                                           << values[static_cast<size_t>(pos)];
      }
    }
    return testing::AssertionSuccess();
  }

  int64_t num_to_host = 0;
  int64_t num_to_device = 0;

 private:
  uint64_t& at(int32_t block, int64_t pos) {
    return device_[static_cast<size_t>(block * block_size_ + pos % block_size_)];
  }

  int64_t block_size_;
  std::vector<uint64_t> device_;
  std::vector<uint64_t> host_;
};

// One step the way the engine runs it: blocks for the chunk, copies, write the chunk's K/V, check every
// position the chunk's tokens read (their window, or everything in a global pool), commit.
inline testing::AssertionResult step(KvCacheManager& kv, KvMemory& mem, SequenceKv& seq, const Tokens& all,
                              const std::vector<uint64_t>& values, int64_t chunk) {
  const int64_t n = seq.num_computed();
  if (!kv.can_append(seq, chunk)) return testing::AssertionFailure() << "can_append false at " << n;
  kv.append(seq, chunk);
  mem.run_copies(kv);
  if (auto r = mem.write(kv, seq, n, n + chunk, values); !r) return r;
  for (int g = 0; g < kv.num_groups(); ++g) {
    const int64_t w = kv.window(g);
    const int64_t first_read = w == 0 ? 0 : std::max<int64_t>(0, n - w + 1);
    if (auto r = mem.holds(seq, g, first_read, n + chunk, values); !r) return r << " (step at " << n << ")";
  }
  kv.commit(seq, std::span<const int32_t>(all).subspan(static_cast<size_t>(n), static_cast<size_t>(chunk)));
  return testing::AssertionSuccess();
}


}  // namespace tide::test
