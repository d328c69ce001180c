// The CUDA paged attention (and KV store) against the CPU reference on random inputs: mixed batches of
// prefill chunks over a cached prefix and decode tokens, GQA, windows smaller than a block, queries
// straddling the window start, and released (null) blocks whose memory holds NaN: reading one would show.
// Every kernel path is covered: the tensor-core prefill kernel (batches with a sequence of more than 8 new
// tokens) and decode kernel (at most 8 per sequence, split over keys) at head_dim 64, 128 and 256 with 1 to
// 12 query heads per KV head, and the generic CUDA-core kernel for other head_dims. With an FP8 cache
// (--kv-cache-dtype fp8): the store writes the CPU's codes and scales bit for bit (the rows are bf16 values),
// and both tensor-core kernels read them; prefill reads them dequantized into bf16 scratch (the default) and
// as codes (the FP8 kernels), and the first is the bf16 kernel on the dequantized values bit for bit.
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "../fp8_round_trip.h"
#include "gpu_test_util.h"

namespace tide {
namespace {

struct SeqSpec {
  int64_t start_pos, num_tokens;
};

struct Case {
  std::vector<SeqSpec> seqs;
  int64_t block_size, window;
  AttentionShape shape;
  // Released blocks are null in the table (as the KV cache leaves them); false keeps their ids, so a kernel
  // that reads any key outside the window, even from a listed block, shows NaN.
  bool null_released = true;
  bool fp8 = false;  // FP8 KV storage on both backends
  // Every K and V head's values replaced by their FP8 round trip (codes times scale, as an FP8 cache holds
  // them) before they are stored: a bf16 cache holding what an FP8 one dequantizes to.
  bool round_trip_kv = false;
  cuda::PrefillAttentionKernel kernel = cuda::PrefillAttentionKernel::kAuto;  // at head_dim 128, bf16
};

// Checks the CUDA attention of case `c` against the CPU reference; returns the CUDA output.
std::vector<float> run_case(const Case& c, uint32_t seed) {
  CpuBackend cpu;
  CudaBackend gpu;
  gpu.set_prefill_attention_kernel(c.kernel);
  const int64_t d = c.shape.head_dim, hq = c.shape.num_heads, hkv = c.shape.num_heads_kv;
  const int64_t row = (hq + 2 * hkv) * d, layers = 3, layer = 1;
  int64_t total_blocks = 0, max_blocks = 0;
  for (const SeqSpec& s : c.seqs) {
    const int64_t n = (s.start_pos + s.num_tokens + c.block_size - 1) / c.block_size;
    total_blocks += n;
    max_blocks = std::max(max_blocks, n);
  }
  std::mt19937 rng(seed);
  std::vector<int32_t> physical(static_cast<size_t>(total_blocks));
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), rng);

  // Every position of every sequence: its qkv row, stored into both caches through the slot mapping.
  std::vector<float> all_rows, new_rows, poison_rows;
  std::vector<int64_t> all_slots, poison_slots;
  std::vector<int32_t> tables(c.seqs.size() * static_cast<size_t>(max_blocks), kNullBlock), positions, starts{0};
  size_t next = 0;
  uint32_t row_seed = seed * 1000;
  for (size_t s = 0; s < c.seqs.size(); ++s) {
    const int64_t len = c.seqs[s].start_pos + c.seqs[s].num_tokens;
    int32_t* table = tables.data() + s * static_cast<size_t>(max_blocks);
    for (int64_t b = 0; b * c.block_size < len; ++b) table[b] = physical[next++];
    for (int64_t p = 0; p < len; ++p) {
      std::vector<float> r = test::random_bf16_values(static_cast<size_t>(row), ++row_seed);
      if (c.round_trip_kv) {
        for (int64_t v = 0; v < 2 * hkv; ++v) test::fp8_round_trip(r.data() + (hq + v) * d, d);
      }
      all_rows.insert(all_rows.end(), r.begin(), r.end());
      all_slots.push_back(int64_t{table[p / c.block_size]} * c.block_size + p % c.block_size);
      if (p >= c.seqs[s].start_pos) {
        new_rows.insert(new_rows.end(), r.begin(), r.end());
        positions.push_back(static_cast<int32_t>(p));
      }
    }
    starts.push_back(static_cast<int32_t>(positions.size()));
    // Blocks wholly before the first key the new tokens read are released: NaN in memory, null in the table.
    const int64_t first_read = c.window == 0 ? 0 : std::max<int64_t>(0, c.seqs[s].start_pos - c.window + 1);
    for (int64_t b = 0; (b + 1) * c.block_size <= first_read; ++b) {
      for (int64_t p = b * c.block_size; p < (b + 1) * c.block_size; ++p) {
        poison_rows.insert(poison_rows.end(), static_cast<size_t>(row), NAN);
        poison_slots.push_back(int64_t{table[b]} * c.block_size + p % c.block_size);
      }
      if (c.null_released) table[b] = kNullBlock;
    }
  }
  const int64_t n_all = static_cast<int64_t>(all_slots.size()), n_new = static_cast<int64_t>(positions.size());
  KvStorage kv_c = test::make_kv(cpu, c.fp8, total_blocks, layers, c.block_size, c.shape);
  KvStorage kv_g = test::make_kv(gpu, c.fp8, total_blocks, layers, c.block_size, c.shape);
  const auto all = test::both(cpu, gpu, all_rows, Shape{n_all, row});
  const auto slots = test::both_i64(cpu, gpu, all_slots, Shape{n_all});
  cpu.store_kv(kv_c, layer, all.cpu, slots.cpu, c.shape);
  gpu.store_kv(kv_g, layer, all.gpu, slots.gpu, c.shape);
  if (!poison_slots.empty()) {
    const int64_t n = static_cast<int64_t>(poison_slots.size());
    const auto nan = test::both(cpu, gpu, poison_rows, Shape{n, row});
    const auto ps = test::both_i64(cpu, gpu, poison_slots, Shape{n});
    cpu.store_kv(kv_c, layer, nan.cpu, ps.cpu, c.shape);
    gpu.store_kv(kv_g, layer, nan.gpu, ps.gpu, c.shape);
  }
  if (c.fp8) {
    // The same codes and scales (NaN rows give NaN scales and codes on both: compared as bytes).
    EXPECT_EQ(test::kv_bytes(gpu, kv_g), test::kv_bytes(cpu, kv_c));
  }

  const auto qkv = test::both(cpu, gpu, new_rows, Shape{n_new, row});
  const auto pos = test::both_i32(cpu, gpu, positions, Shape{n_new});
  const auto st = test::both_i32(cpu, gpu, starts, Shape{static_cast<int64_t>(starts.size())});
  const auto tb = test::both_i32(cpu, gpu, tables, Shape{static_cast<int64_t>(c.seqs.size()), max_blocks});
  const auto unused_slots = test::both_i64(cpu, gpu, std::vector<int64_t>(static_cast<size_t>(n_new), 0), Shape{n_new});
  const int64_t max_position = *std::max_element(positions.begin(), positions.end());
  int64_t max_seq_tokens = 0;
  for (const SeqSpec& s : c.seqs) max_seq_tokens = std::max(max_seq_tokens, s.num_tokens);
  const AttentionBatch batch_c{pos.cpu, st.cpu, tb.cpu, unused_slots.cpu, c.block_size, max_position, max_seq_tokens};
  // The model's decode-first order: a mixed step's decodes go to the decode kernel, the rest to the prefill kernel.
  const DecodeFirstOrder order = decode_first_order(starts);
  const AttentionBatch batch_g{pos.gpu,
                               st.gpu,
                               tb.gpu,
                               unused_slots.gpu,
                               c.block_size,
                               max_position,
                               max_seq_tokens,
                               gpu.upload(order.order.data(), DType::kI32, Shape{std::ssize(order.order)}),
                               order.num_decode_seqs,
                               order.max_decode_seq_tokens};
  Tensor out_c = cpu.alloc(DType::kF32, Shape{n_new, hq * d}), out_g = gpu.alloc(DType::kBF16, Shape{n_new, hq * d});
  cpu.attention(out_c, qkv.cpu, kv_c, layer, batch_c, c.shape, c.window);
  gpu.attention(out_g, qkv.gpu, kv_g, layer, batch_g, c.shape, c.window);
  const std::vector<float> got = test::to_f32(gpu, out_g), want = test::to_f32(cpu, out_c);
  for (float v : got) EXPECT_TRUE(std::isfinite(v)) << "the kernel read a released block";
  EXPECT_LT(test::rel_err(got, want), 2 * test::kBf16Rounding);
  const bool mixed = order.num_decode_seqs > 0 && order.num_decode_seqs < std::ssize(c.seqs);
  if (mixed) {
    // Without the order the prefill kernel serves every sequence of the mixed step.
    AttentionBatch unordered = batch_g;
    unordered.seq_order = {};
    Tensor out_u = gpu.alloc(DType::kBF16, Shape{n_new, hq * d});
    gpu.attention(out_u, qkv.gpu, kv_g, layer, unordered, c.shape, c.window);
    const std::vector<float> one_kernel = test::to_f32(gpu, out_u);
    for (float v : one_kernel) EXPECT_TRUE(std::isfinite(v)) << "one kernel: the kernel read a released block";
    EXPECT_LT(test::rel_err(one_kernel, want), 2 * test::kBf16Rounding) << "one kernel for the mixed step";
  }
  if (c.fp8 && max_seq_tokens > 8) {
    // The FP8 prefill kernels on the codes, which serve where the dequantized blocks would not fit.
    gpu.set_fp8_kv_prefill_dequantize(false);
    Tensor out_n = gpu.alloc(DType::kBF16, Shape{n_new, hq * d});
    gpu.attention(out_n, qkv.gpu, kv_g, layer, batch_g, c.shape, c.window);
    gpu.set_fp8_kv_prefill_dequantize(true);
    const std::vector<float> codes = test::to_f32(gpu, out_n);
    for (float v : codes) EXPECT_TRUE(std::isfinite(v)) << "FP8 kernels: the kernel read a released block";
    EXPECT_LT(test::rel_err(codes, want), 2 * test::kBf16Rounding) << "the FP8 prefill kernels";
  }
  if (max_seq_tokens <= 8) {
    // The decode kernel's other builds (two CTAs per SM with deeper stages, three with shallower ones, and the
    // splits each plans), which the automatic choice takes for other batches and contexts.
    for (const int ctas : {2, 3}) {
      gpu.set_decode_ctas_per_sm(ctas);
      gpu.attention(out_g, qkv.gpu, kv_g, layer, batch_g, c.shape, c.window);
      const std::vector<float> forced = test::to_f32(gpu, out_g);
      for (float v : forced) EXPECT_TRUE(std::isfinite(v)) << ctas << " CTAs per SM: the kernel read a released block";
      EXPECT_LT(test::rel_err(forced, want), 2 * test::kBf16Rounding) << ctas << " CTAs per SM";
    }
    gpu.set_decode_ctas_per_sm(0);
  }
  return got;
}

TEST(CudaAttention, MixedBatchGlobalGqa) {
  TIDE_REQUIRE_GPU();
  run_case({{{0, 40}, {100, 1}, {33, 17}}, 16, 0, {8, 2, 128}}, 1);
}

TEST(CudaAttention, SlidingWindowQueriesStraddleTheWindowStart) {
  TIDE_REQUIRE_GPU();
  run_case({{{0, 70}, {90, 1}, {45, 30}, {31, 1}}, 16, 32, {8, 2, 128}}, 2);
}

TEST(CudaAttention, ChunkedPrefillOverManyRowTilesWithAWindow) {
  TIDE_REQUIRE_GPU();
  run_case({{{0, 200}, {300, 130}, {77, 1}}, 16, 100, {8, 2, 128}}, 6);
}

TEST(CudaAttention, ChunkedPrefillGlobalHeadDim32) {
  TIDE_REQUIRE_GPU();
  run_case({{{0, 70}, {40, 33}}, 16, 0, {4, 2, 32}}, 7);
}

TEST(CudaAttention, WindowSmallerThanABlock) {
  TIDE_REQUIRE_GPU();
  run_case({{{0, 23}, {50, 1}, {17, 5}}, 16, 5, {4, 2, 64}}, 3);
}

TEST(CudaAttention, CommandAHeadsAndLongContextDecode) {
  TIDE_REQUIRE_GPU();
  run_case({{{4500, 1}, {5000, 3}, {0, 9}}, 16, 4096, {96, 8, 128}}, 4);
}

TEST(CudaAttention, SmallHeadDimAndMultiQuery) {
  TIDE_REQUIRE_GPU();
  run_case({{{3, 6}, {0, 1}, {10, 2}}, 4, 7, {6, 1, 32}}, 5);
}

// --- tensor-core prefill kernel: row tiles of (token, query head) ---

TEST(CudaAttention, PrefillHeadDim64BlockSize5) {
  TIDE_REQUIRE_GPU();
  run_case({{{0, 150}, {37, 60}, {12, 1}}, 5, 0, {16, 4, 64}}, 11);
}

TEST(CudaAttention, PrefillHeadDim256WindowSmallerThanABlock) {
  TIDE_REQUIRE_GPU();
  run_case({{{0, 90}, {64, 20}}, 16, 6, {8, 4, 256}}, 12);
}

TEST(CudaAttention, PrefillMultiHeadBlockSize3Window) {
  TIDE_REQUIRE_GPU();
  run_case({{{0, 140}, {200, 45}}, 3, 50, {4, 4, 128}}, 13);
}

TEST(CudaAttention, PrefillCommandAGroupOverCachedPrefixWithWindow) {
  TIDE_REQUIRE_GPU();  // 12 heads per KV head: a 128-row tile ends inside a token
  run_case({{{300, 40}, {0, 23}, {80, 1}}, 16, 64, {96, 8, 128}}, 14);
}

TEST(CudaAttention, PrefillLongCausalOverManyKeyTiles) {
  TIDE_REQUIRE_GPU();
  run_case({{{0, 520}, {700, 130}}, 16, 0, {8, 2, 128}}, 15);
}

TEST(CudaAttention, PrefillNeverReadsKeysBeforeTheWindowEvenFromListedBlocks) {
  TIDE_REQUIRE_GPU();  // window starts that are not multiples of the key tile, NaN blocks still in the table
  run_case({{{150, 70}, {0, 100}, {421, 9}}, 16, 70, {8, 2, 128}, false}, 16);
}

// Both prefill kernels at head_dim 128 (wgmma, the default, and mma.sync), over a bf16 and an FP8 cache:
// ragged chunks over cached prefixes, block sizes that do not divide the 128-key tile, windows not aligned to
// it, 4 and 12 query heads per KV head, NaN in released blocks (null, and still listed).
TEST(CudaAttention, PrefillBothKernelsOnRaggedChunksWindowsAndGroups) {
  TIDE_REQUIRE_GPU();
  using K = cuda::PrefillAttentionKernel;
  for (const bool fp8 : {false, true}) {
    for (const K kernel : {K::kWgmma, K::kMmaSync}) {
      SCOPED_TRACE(fmt::format("{}, {} cache", kernel == K::kWgmma ? "wgmma" : "mma.sync", fp8 ? "FP8" : "bf16"));
      Case r7b{{{0, 700}, {900, 260}, {129, 3}, {5, 1}, {1500, 97}}, 16, 0, {16, 4, 128}};
      Case r7b_window{{{0, 700}, {1200, 300}, {255, 129}}, 5, 300, {16, 4, 128}};
      Case command_a{{{640, 200}, {0, 150}, {100, 11}}, 16, 257, {24, 2, 128}, false};
      for (Case* c : {&r7b, &r7b_window, &command_a}) {
        c->kernel = kernel;
        c->fp8 = fp8;
        run_case(*c, 61);
      }
    }
  }
}

// More sequences in one prefill launch than the wgmma kernel stages the token counts of (1024): the row
// tiles past each short sequence's rows, and the items of the sequences past the staged ones, are found empty
// through the global counts. A step of 1100 short sequences (1 to 3 new tokens) and one of 300: the decode-first
// order gives the short ones to the decode kernel, and run_case also runs the prefill kernel over all 1101,
// each with the long one's 10 row tiles of items.
TEST(CudaAttention, PrefillOfMoreSequencesThanTheKernelStagesCountsOf) {
  TIDE_REQUIRE_GPU();
  using K = cuda::PrefillAttentionKernel;
  Case c{{{0, 300}}, 16, 0, {16, 4, 128}};
  for (int i = 0; i < 1100; ++i) c.seqs.push_back({(i * 37) % 200, 1 + i % 3});
  for (const bool fp8 : {false, true}) {
    for (const K kernel : {K::kWgmma, K::kMmaSync}) {
      SCOPED_TRACE(fmt::format("{}, {} cache", kernel == K::kWgmma ? "wgmma" : "mma.sync", fp8 ? "FP8" : "bf16"));
      c.kernel = kernel;
      c.fp8 = fp8;
      c.window = fp8 ? 50 : 0;
      run_case(c, 91);
    }
  }
}

// Prefill over an FP8 cache dequantizes the blocks it reads exactly: its outputs are those of the bf16 kernel
// over a bf16 cache holding the same values, bit for bit, at both kernels, with windows, groups, ragged chunks
// over cached prefixes, block sizes that do not divide a tile and NaN in released blocks. (No decodes: the
// decode kernel reads the codes, scaling scores and probabilities, which rounds otherwise.)
TEST(CudaAttention, Fp8PrefillIsTheBf16KernelOnTheDequantizedValuesBitForBit) {
  TIDE_REQUIRE_GPU();
  using K = cuda::PrefillAttentionKernel;
  for (const K kernel : {K::kWgmma, K::kMmaSync}) {
    SCOPED_TRACE(kernel == K::kWgmma ? "wgmma" : "mma.sync");
    Case global{{{0, 300}, {500, 140}, {30, 12}}, 16, 0, {16, 4, 128}};
    Case window{{{0, 400}, {1200, 260}}, 5, 300, {24, 2, 128}, false};
    Case head_64{{{90, 77}, {0, 30}}, 3, 40, {8, 2, 64}};
    for (Case* c : {&global, &window, &head_64}) {
      c->kernel = kernel;
      Case fp8 = *c, bf16 = *c;
      fp8.fp8 = true;
      bf16.round_trip_kv = true;
      EXPECT_EQ(run_case(fp8, 81), run_case(bf16, 81)) << "window " << c->window << ", head_dim " << c->shape.head_dim;
    }
  }
}

// A serving step: decodes and verify steps (1 to 8 tokens; five take one CTA of the decode kernel, 20 rows in
// three 8-row tiles, eight two CTAs of 6 and 2 tokens) around two prefill chunks, in batch order, long contexts so that the decodes' keys are split and
// merged. The decode-first order sends the decodes to the decode kernel, the chunks to the prefill kernel.
TEST(CudaAttention, MixedStepDecodesAndChunksOnTheirOwnKernels) {
  TIDE_REQUIRE_GPU();
  for (const bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "FP8 cache" : "bf16 cache");
    Case c{{{0, 300}, {2000, 1}, {700, 5}, {1200, 120}, {3000, 8}, {40, 1}, {5100, 2}}, 16, 0, {16, 4, 128}};
    c.fp8 = fp8;
    run_case(c, 71);
    Case window{{{4000, 1}, {0, 90}, {2500, 5}, {33, 1}}, 16, 1000, {96, 8, 128}};
    window.fp8 = fp8;
    run_case(window, 72);
  }
}

// --- FP8 KV storage: both tensor-core kernels, head_dim 64 / 128 / 256, windows, GQA, NaN in released blocks ---

TEST(CudaAttention, Fp8KvDecodeAndPrefill) {
  TIDE_REQUIRE_GPU();
  Case decode{{{3000, 1}, {100, 1}, {500, 3}, {0, 1}}, 16, 0, {32, 8, 128}};
  Case decode_window{{{2000, 8}, {40, 1}}, 5, 37, {16, 4, 64}};
  Case prefill{{{0, 150}, {37, 60}, {12, 1}}, 16, 50, {8, 2, 128}, false};
  Case prefill_256{{{0, 90}, {64, 20}}, 16, 6, {8, 4, 256}};
  Case decode_256{{{2500, 1}, {90, 2}}, 16, 0, {8, 2, 256}};
  Case command_a{{{300, 40}, {0, 23}, {80, 1}}, 16, 64, {96, 8, 128}};
  for (Case* c : {&decode, &decode_window, &prefill, &prefill_256, &decode_256, &command_a}) {
    c->fp8 = true;
    run_case(*c, 51);
  }
}

TEST(CudaAttention, PrefillSameOutputsWithOrWithoutACachedPrefix) {
  TIDE_REQUIRE_GPU();  // the same rows, positions 112 .. 299, computed in one chunk or after a cached prefix
  const AttentionShape shape{8, 2, 128};
  for (int64_t window : {int64_t{0}, int64_t{100}}) {
    const std::vector<float> whole = run_case({{{0, 300}}, 16, window, shape}, 41);
    const std::vector<float> tail = run_case({{{112, 188}}, 16, window, shape}, 41);
    const std::vector<float> whole_tail(whole.end() - static_cast<std::ptrdiff_t>(tail.size()), whole.end());
    EXPECT_EQ(whole_tail, tail) << "window " << window;
  }
}

// --- tensor-core decode kernel: split over keys ---

// The launch plan (host arithmetic, no GPU needed): three CTAs per SM while the splits stay short, two with
// deeper stages for long splits and wherever three do not fit (more than 8 query rows, head_dim 256); splits
// fill one wave of resident CTAs, are at least one 64-key tile and at most 128.
TEST(CudaAttention, DecodePlanSplitsAndCtasPerSm) {
  constexpr int kSms = 132;
  // R7B (8 KV heads, group 4), one token per sequence.
  EXPECT_EQ(cuda::mma_decode_plan(1, 8, 1025, kSms, 128, 4, 1).ctas_per_sm, 3);
  EXPECT_EQ(cuda::mma_decode_plan(1, 8, 1025, kSms, 128, 4, 1).splits, 17);          // by keys: 17 tiles
  EXPECT_EQ(cuda::mma_decode_plan(1, 8, 32769, kSms, 128, 4, 1).splits, 49);         // 3 x 132 / 8
  EXPECT_EQ(cuda::mma_decode_plan(8, 8, 32769, kSms, 128, 4, 1).ctas_per_sm, 3);     // 6 splits of 5.5K keys
  EXPECT_EQ(cuda::mma_decode_plan(8, 8, 32769, kSms, 128, 4, 1).splits, 6);
  const cuda::DecodePlan long_splits = cuda::mma_decode_plan(32, 8, 32769, kSms, 128, 4, 1);
  EXPECT_EQ(long_splits.ctas_per_sm, 2);  // one split of 32K keys
  EXPECT_EQ(long_splits.splits, 1);
  EXPECT_EQ(cuda::mma_decode_plan(256, 8, 1025, kSms, 128, 4, 1).splits, 1);
  EXPECT_EQ(cuda::mma_decode_plan(256, 8, 1025, kSms, 128, 4, 1).ctas_per_sm, 3);
  // Forced: two CTAs per SM plan their own splits (2 x 132 / 8), three where they fit.
  EXPECT_EQ(cuda::mma_decode_plan(1, 8, 32769, kSms, 128, 4, 1, 2).splits, 33);
  EXPECT_EQ(cuda::mma_decode_plan(1, 8, 32769, kSms, 128, 4, 1, 2).ctas_per_sm, 2);
  EXPECT_EQ(cuda::mma_decode_plan(32, 8, 32769, kSms, 128, 4, 1, 3).ctas_per_sm, 3);
  // More than 8 query rows a CTA (Command A's group of 12; a verify step's 4 tokens x 4 heads), head_dim 256.
  EXPECT_EQ(cuda::mma_decode_plan(1, 8, 1025, kSms, 128, 12, 1, 3).ctas_per_sm, 2);
  EXPECT_EQ(cuda::mma_decode_plan(32, 8, 1025, kSms, 128, 4, 5).ctas_per_sm, 2);
  EXPECT_EQ(cuda::mma_decode_plan(1, 8, 1025, kSms, 128, 4, 2).ctas_per_sm, 3);  // 2 tokens x 4 heads
  EXPECT_EQ(cuda::mma_decode_plan(1, 2, 1025, kSms, 256, 4, 1).ctas_per_sm, 2);
  // Bounds: at least one split, at most 128.
  EXPECT_EQ(cuda::mma_decode_plan(4096, 8, 1 << 20, kSms, 128, 4, 1).splits, 1);
  EXPECT_EQ(cuda::mma_decode_plan(1, 1, 1 << 20, kSms, 128, 4, 1).splits, 128);
}

// The decode launch's CTAs and split-output rows (host arithmetic, no GPU needed): one CTA per token, or per
// tile of a sequence's tokens; with a sequence list (a mixed step's decodes) always per listed sequence's tiles,
// and the split outputs kept for those tiles' tokens only, not for every token of the step.
TEST(CudaAttention, DecodeCtasAndSlotsWithAndWithoutASequenceList) {
  // 300 tokens of 40 sequences; R7B's group of 4: one token a CTA when the sequences bring one each.
  EXPECT_EQ(cuda::mma_decode_ctas(128, 300, 40, 4, 1), 300);
  EXPECT_EQ(cuda::mma_decode_slot_tokens(128, 300, 40, 4, 1), 300);
  // Up to 5 tokens a sequence (a verify step of 1 + 4): all 5 in one CTA (20 of its 24 rows); slots by token.
  EXPECT_EQ(cuda::mma_decode_tokens_per_cta(128, 4, 5), 5);
  EXPECT_EQ(cuda::mma_decode_ctas(128, 300, 40, 4, 5), 40);
  EXPECT_EQ(cuda::mma_decode_slot_tokens(128, 300, 40, 4, 5), 300);
  // Up to 8 tokens: 6 a CTA, 2 tiles per sequence; at head_dim 256 (16 rows) 4 a CTA.
  EXPECT_EQ(cuda::mma_decode_ctas(128, 300, 40, 4, 8), 80);
  EXPECT_EQ(cuda::mma_decode_tokens_per_cta(256, 4, 5), 4);
  EXPECT_EQ(cuda::mma_decode_ctas(256, 300, 40, 4, 5), 80);
  // Listed: the 40 decodes of a step whose 300 tokens include prefill chunks.
  EXPECT_EQ(cuda::mma_decode_ctas(128, 300, 40, 4, 1, true), 40);
  EXPECT_EQ(cuda::mma_decode_slot_tokens(128, 300, 40, 4, 1, true), 40);
  EXPECT_EQ(cuda::mma_decode_ctas(128, 300, 40, 4, 8, true), 80);
  EXPECT_EQ(cuda::mma_decode_slot_tokens(128, 300, 40, 4, 8, true), 480);  // 2 tiles of 6 tokens each
  // Command A's group of 12: two tokens a CTA, so 2 tiles for 3 tokens; one token a CTA at head_dim 256.
  EXPECT_EQ(cuda::mma_decode_ctas(128, 300, 40, 12, 3, true), 80);
  EXPECT_EQ(cuda::mma_decode_slot_tokens(128, 300, 40, 12, 3, true), 160);
  EXPECT_EQ(cuda::mma_decode_ctas(256, 300, 40, 12, 3, true), 120);
  // A group of 16 (the kernel's most): one token a CTA.
  EXPECT_EQ(cuda::mma_decode_tokens_per_cta(128, 16, 4), 1);
}

// A verify step's tokens share a decode CTA; each of their rows is the bits the one-token decode of that token
// computes where the splits are single tiles (a short context at batch 1): tiles start at multiples of 64 keys
// whatever the CTA's first token, and the merge adds the splits in order. Windows whose start falls inside a
// tile, with the last tokens' windows starting a tile after the first token's (317 - 63 = 254, 258 = 256 + 2);
// groups 2 and 4, head_dim 64 and 128, bf16 and FP8 caches.
TEST(CudaAttention, VerifyRowsAreTheDecodeRowsBitForBit) {
  TIDE_REQUIRE_GPU();
  const int64_t p0 = 317, tokens = 5;
  for (const AttentionShape shape : {AttentionShape{4, 2, 64}, AttentionShape{8, 2, 128}}) {
    const int64_t width = shape.num_heads * shape.head_dim;
    for (const int64_t window : {int64_t{0}, int64_t{64}, int64_t{100}}) {
      for (const bool fp8 : {false, true}) {
        const std::vector<float> verify = run_case({{{p0, tokens}}, 16, window, shape, true, fp8}, 40);
        for (int64_t i = 0; i < tokens; ++i) {
          const std::vector<float> decode = run_case({{{p0 + i, 1}}, 16, window, shape, true, fp8}, 40);
          ASSERT_EQ(std::ssize(decode), width);
          EXPECT_TRUE(std::equal(decode.begin(), decode.end(), verify.begin() + i * width))
              << "head_dim " << shape.head_dim << ", window " << window << (fp8 ? ", FP8" : "") << ": token "
              << p0 + i;
        }
      }
    }
  }
}

// The keys a decode CTA spans: from 0 without a window; with one, from the first token's window start aligned
// down to a 64-key tile to the last token.
TEST(CudaAttention, DecodeMaxKeysCoverTheAlignedWindow) {
  EXPECT_EQ(cuda::mma_decode_max_keys(0, 1023, 1), 1024);
  EXPECT_EQ(cuda::mma_decode_max_keys(4096, 100000, 1), 4096 + 63);
  EXPECT_EQ(cuda::mma_decode_max_keys(4096, 100000, 5), 4096 + 63 + 4);
  EXPECT_EQ(cuda::mma_decode_max_keys(64, 40, 5), 41);  // never past the positions
}

TEST(CudaAttention, DecodeLongContextManySplits) {
  TIDE_REQUIRE_GPU();
  run_case({{{3000, 1}, {100, 1}, {5000, 1}, {0, 1}}, 16, 0, {32, 8, 128}}, 21);
}

TEST(CudaAttention, DecodeFewTokensPerSequenceWindowBlockSize5) {
  TIDE_REQUIRE_GPU();
  run_case({{{2000, 8}, {500, 3}, {40, 1}}, 5, 37, {16, 4, 128}}, 22);
}

TEST(CudaAttention, DecodeCommandAGroupWindow) {
  TIDE_REQUIRE_GPU();
  run_case({{{4500, 1}, {5000, 1}, {7, 1}, {4100, 2}}, 16, 4096, {96, 8, 128}}, 23);
}

TEST(CudaAttention, DecodeNeverReadsKeysBeforeTheWindowEvenFromListedBlocks) {
  TIDE_REQUIRE_GPU();
  run_case({{{3000, 1}, {517, 2}, {90, 1}}, 16, 300, {16, 4, 128}, false}, 26);
}

TEST(CudaAttention, DecodeHeadDim64MultiQuery) {
  TIDE_REQUIRE_GPU();
  run_case({{{1500, 1}, {3, 2}, {700, 1}}, 4, 0, {8, 1, 64}}, 24);
}

// Verify steps whose tokens fill a CTA's three 8-row tiles: 3 tokens x 8 heads (head_dim 64), 6 x 4 and 5 x 4
// with a window and block size 5, and with an FP8 cache; each row masking its own keys.
TEST(CudaAttention, DecodeThreeRowTilesPerCta) {
  TIDE_REQUIRE_GPU();
  run_case({{{1500, 3}, {3, 3}, {700, 2}}, 4, 0, {8, 1, 64}}, 27);
  for (const bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "FP8 cache" : "bf16 cache");
    Case c{{{2000, 6}, {500, 5}, {40, 6}, {7, 5}}, 5, 37, {16, 4, 128}};
    c.fp8 = fp8;
    run_case(c, 28);
    Case long_context{{{6000, 5}, {3100, 6}}, 16, 0, {32, 8, 128}};
    long_context.fp8 = fp8;
    run_case(long_context, 29);
  }
}

TEST(CudaAttention, DecodeHeadDim256WindowSmallerThanABlock) {
  TIDE_REQUIRE_GPU();
  run_case({{{900, 1}, {61, 4}, {2, 1}}, 16, 9, {8, 2, 256}}, 25);
}

// --- generic CUDA-core kernel: head_dims without a tensor-core instantiation ---

TEST(CudaAttention, GenericHeadDim48MixedBatch) {
  TIDE_REQUIRE_GPU();
  run_case({{{0, 30}, {60, 1}, {20, 9}}, 5, 25, {6, 2, 48}}, 31);
}

}  // namespace
}  // namespace tide
