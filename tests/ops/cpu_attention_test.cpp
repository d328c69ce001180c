// Paged attention of the CPU backend against dense attention computed directly in double, on random
// inputs: mixed batches (prefill chunks with a cached prefix, single decode tokens), GQA, windows smaller
// than a block and larger than the context, shuffled physical blocks, and kNullBlock entries before the
// window that must never be read. With FP8 KV storage the same cases hold against the dense reference over
// the vectors the cache stands for (each head's K or V vector quantized with its own scale, core/fp8.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/fp8.h"
#include "../fp8_round_trip.h"

namespace tide {
namespace {

struct SeqSpec {
  int64_t start_pos;   // cached positions before this step
  int64_t num_tokens;  // new tokens this step
};

struct AttentionCase {
  std::vector<SeqSpec> seqs;
  int64_t block_size;
  int64_t window;  // 0: global
};

using test::fp8_round_trip;

void run_case(const AttentionCase& c, const AttentionShape& shape, uint32_t seed, bool fp8 = false) {
  CpuBackend b;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  const int64_t d = shape.head_dim, kv_size = shape.num_heads_kv * d;
  const int64_t row = (shape.num_heads + 2 * shape.num_heads_kv) * d;
  const int64_t num_layers = 2, layer = 1;

  // Random K/V for every position of every sequence (the history), and random q for the new tokens.
  int64_t total_blocks = 0, max_blocks = 0;
  for (const SeqSpec& s : c.seqs) {
    const int64_t n = (s.start_pos + s.num_tokens + c.block_size - 1) / c.block_size;
    total_blocks += n;
    max_blocks = std::max(max_blocks, n);
  }
  std::vector<int32_t> physical(static_cast<size_t>(total_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);

  KvStorage kv{b.alloc(fp8 ? DType::kF8E4M3 : DType::kF32, Shape{total_blocks, num_layers, 2 * c.block_size, kv_size}),
               num_layers, c.block_size};
  if (fp8) {
    kv.scales = b.alloc(DType::kF32, Shape{total_blocks, num_layers, 2 * shape.num_heads_kv, c.block_size});
    std::fill_n(static_cast<uint8_t*>(kv.data.data), kv.data.numel(), fp8::kE4M3NaN);  // unwritten slots poison
    std::fill_n(kv.scales.as<float>(), kv.scales.numel(), NAN);
  } else {
    std::fill(kv.data.as<float>(), kv.data.as<float>() + kv.data.numel(), NAN);
  }

  std::vector<int32_t> tables(static_cast<size_t>(c.seqs.size() * max_blocks), kNullBlock);
  std::vector<int32_t> positions, starts{0};
  std::vector<int64_t> slots;
  std::vector<std::vector<float>> history;  // per sequence: [positions][2][kv_size] k then v
  std::vector<std::vector<float>> stands_for;  // what the cache holds of history: the same, or FP8-rounded
  Tensor qkv_all;
  std::vector<float> qkv_rows;
  size_t next_block = 0;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const SeqSpec& spec = c.seqs[s];
    const int64_t len = spec.start_pos + spec.num_tokens;
    const int64_t first_read = c.window == 0 ? 0 : std::max<int64_t>(0, spec.start_pos - c.window + 1);
    for (int64_t lb = 0; lb * c.block_size < len; ++lb) {
      const int32_t block = physical[next_block++];
      // Blocks wholly before the first position this step reads are released (null) as the
      // window-aware cache will do; their memory keeps NaN.
      if ((lb + 1) * c.block_size <= first_read) continue;
      tables[s * static_cast<size_t>(max_blocks) + static_cast<size_t>(lb)] = block;
    }
    history.emplace_back(static_cast<size_t>(len * 2 * kv_size));
    for (float& v : history.back()) v = normal(rng);
    stands_for.push_back(history.back());
    if (fp8) {
      for (int64_t i = 0; i < len * 2 * shape.num_heads_kv; ++i) fp8_round_trip(stands_for.back().data() + i * d, d);
    }
    // Cached prefix: written straight into the storage (as an earlier step would have), in its documented
    // layout (backend.h, KvStorage).
    for (int64_t p = first_read; p < spec.start_pos; ++p) {
      const int32_t block = tables[s * static_cast<size_t>(max_blocks) + static_cast<size_t>(p / c.block_size)];
      for (int kvi = 0; kvi < 2; ++kvi) {
        const int64_t at = (((block * num_layers + layer) * 2 + kvi) * c.block_size + p % c.block_size) * kv_size;
        const float* src = history.back().data() + (p * 2 + kvi) * kv_size;
        if (!fp8) {
          std::copy_n(src, kv_size, kv.data.as<float>() + at);
          continue;
        }
        for (int64_t head = 0; head < shape.num_heads_kv; ++head) {
          std::vector<float> x(src + head * d, src + (head + 1) * d);
          const int64_t scale_at =
              (((block * num_layers + layer) * 2 + kvi) * shape.num_heads_kv + head) * c.block_size + p % c.block_size;
          fp8_round_trip(x.data(), d, static_cast<uint8_t*>(kv.data.data) + at + head * d,
                         kv.scales.as<float>() + scale_at);
        }
      }
    }
    // New tokens: q random, k/v from the history, stored by store_kv through the slot mapping.
    for (int64_t p = spec.start_pos; p < len; ++p) {
      positions.push_back(static_cast<int32_t>(p));
      const int32_t block = tables[s * static_cast<size_t>(max_blocks) + static_cast<size_t>(p / c.block_size)];
      slots.push_back(int64_t{block} * c.block_size + p % c.block_size);
      for (int64_t i = 0; i < shape.num_heads * d; ++i) qkv_rows.push_back(normal(rng));
      for (int64_t i = 0; i < 2 * kv_size; ++i) qkv_rows.push_back(history.back()[p * 2 * kv_size + i]);
    }
    starts.push_back(static_cast<int32_t>(positions.size()));
  }
  const int64_t num_tokens = static_cast<int64_t>(positions.size());
  const Tensor qkv = b.upload(qkv_rows.data(), DType::kF32, Shape{num_tokens, row});
  AttentionBatch batch{b.upload(positions.data(), DType::kI32, Shape{num_tokens}),
                       b.upload(starts.data(), DType::kI32, Shape{static_cast<int64_t>(starts.size())}),
                       b.upload(tables.data(), DType::kI32, Shape{static_cast<int64_t>(c.seqs.size()), max_blocks}),
                       b.upload(slots.data(), DType::kI64, Shape{num_tokens}), c.block_size};
  b.store_kv(kv, layer, qkv, batch.slot_mapping, shape);
  Tensor out = b.alloc(DType::kF32, Shape{num_tokens, shape.num_heads * d});
  b.attention(out, qkv, kv, layer, batch, shape, c.window);

  // Dense reference in double.
  const int64_t group = shape.num_heads / shape.num_heads_kv;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    for (int64_t t = starts[s]; t < starts[s + 1]; ++t) {
      const int64_t pos = positions[static_cast<size_t>(t)];
      const int64_t lo = c.window == 0 ? 0 : std::max<int64_t>(0, pos - c.window + 1);
      for (int64_t h = 0; h < shape.num_heads; ++h) {
        const float* q = qkv_rows.data() + t * row + h * d;
        std::vector<double> w;
        double mx = -INFINITY;
        for (int64_t k = lo; k <= pos; ++k) {
          const float* key = stands_for[s].data() + k * 2 * kv_size + (h / group) * d;
          double dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += double{q[i]} * key[i];
          w.push_back(dot / std::sqrt(double(d)));
          mx = std::max(mx, w.back());
        }
        double sum = 0;
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < d; ++i) {
          double want = 0;
          for (int64_t k = lo; k <= pos; ++k) {
            want += w[static_cast<size_t>(k - lo)] / sum * stands_for[s][(k * 2 + 1) * kv_size + (h / group) * d + i];
          }
          const float got = out.as<float>()[t * shape.num_heads * d + h * d + i];
          ASSERT_TRUE(std::isfinite(got)) << "read an unwritten or released slot: seq " << s << " pos " << pos;
          ASSERT_NEAR(got, want, 1e-4) << "seq " << s << " pos " << pos << " head " << h;
        }
      }
    }
  }
}

TEST(CpuAttention, MixedBatchGlobal) {
  run_case({{{0, 19}, {30, 1}, {7, 9}}, 4, 0}, {8, 2, 16}, 1);
}

TEST(CpuAttention, MixedBatchWindowLargerThanBlock) {
  run_case({{{0, 40}, {45, 1}, {21, 12}}, 4, 10}, {4, 2, 32}, 2);
}

TEST(CpuAttention, WindowSmallerThanBlock) {
  run_case({{{0, 23}, {50, 1}, {17, 5}}, 8, 3}, {6, 3, 8}, 3);
}

TEST(CpuAttention, WindowOfOneAttendsToItself) {
  run_case({{{0, 9}, {12, 1}}, 4, 1}, {2, 1, 8}, 4);
}

TEST(CpuAttention, WindowLargerThanContextAndMultiQueryHeads) {
  run_case({{{3, 6}, {0, 1}}, 2, 100}, {4, 1, 64}, 5);
}

TEST(CpuAttention, Fp8KvMixedBatchGlobal) {
  run_case({{{0, 19}, {30, 1}, {7, 9}}, 4, 0}, {8, 2, 16}, 6, /*fp8=*/true);
}

TEST(CpuAttention, Fp8KvWindowSmallerThanBlockAndMultiQueryHeads) {
  run_case({{{0, 23}, {50, 1}, {17, 5}}, 8, 3}, {6, 1, 32}, 7, /*fp8=*/true);
}

TEST(CpuAttention, Fp8KvWindowLargerThanBlock) {
  run_case({{{0, 40}, {45, 1}, {21, 12}}, 4, 10}, {4, 2, 128}, 8, /*fp8=*/true);
}

TEST(CpuAttention, ReadingANullBlockInsideTheWindowIsAnError) {
  CpuBackend b;
  const AttentionShape shape{1, 1, 2};
  KvStorage kv{b.alloc(DType::kF32, Shape{2, 1, 2 * 2, 2}), 1, 2};
  const int32_t pos[1] = {2}, starts[2] = {0, 1}, table[2] = {kNullBlock, 1};
  const int64_t slot[1] = {2};
  AttentionBatch batch{b.upload(pos, DType::kI32, Shape{1}), b.upload(starts, DType::kI32, Shape{2}),
                       b.upload(table, DType::kI32, Shape{1, 2}), b.upload(slot, DType::kI64, Shape{1}), 2};
  const Tensor qkv = b.alloc(DType::kF32, Shape{1, 6});
  Tensor out = b.alloc(DType::kF32, Shape{1, 2});
  b.store_kv(kv, 0, qkv, batch.slot_mapping, shape);
  EXPECT_NO_THROW(b.attention(out, qkv, kv, 0, batch, shape, 1));  // window 1 reads position 2 only
  EXPECT_THROW(b.attention(out, qkv, kv, 0, batch, shape, 3), Error);  // needs position 0: null block
}

// The decode-first order a mixed step's attention may follow: decodes (at most kDecodeSeqTokens new tokens) in
// batch order, then the prefill chunks in batch order.
TEST(AttentionOrder, DecodesFirstEachKindInBatchOrder) {
  const int32_t starts[] = {0, 300, 301, 306, 426, 434, 435, 444};  // 300, 1, 5, 120, 8, 1, 9 tokens
  const DecodeFirstOrder d = decode_first_order(starts);
  EXPECT_EQ(d.order, (std::vector<int32_t>{1, 2, 4, 5, 0, 3, 6}));
  EXPECT_EQ(d.num_decode_seqs, 4);
  EXPECT_EQ(d.max_decode_seq_tokens, kDecodeSeqTokens);
  const int32_t prefill_only[] = {0, 9, 20};
  const DecodeFirstOrder p = decode_first_order(prefill_only);
  EXPECT_EQ(p.order, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(p.num_decode_seqs, 0);
  EXPECT_EQ(p.max_decode_seq_tokens, 0);
  const int32_t empty[] = {0};
  EXPECT_TRUE(decode_first_order(empty).order.empty());
}

}  // namespace
}  // namespace tide
