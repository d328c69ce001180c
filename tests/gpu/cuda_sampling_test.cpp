// The CUDA sample op against the CPU reference on random logits: many rows with mixed parameters (greedy,
// temperature, top-k, top-p, min-p, penalties over random histories, logit biases including -inf bans of
// the argmax), V small and unaligned (scalar loads) and V = 256000 (float4 loads), and rows mostly or
// entirely -inf. Both backends share sampling_math.h (one IEEE rounding per operation,
// integer weights and prefix sums), so the ids must be identical, not merely close; so must the
// penalized logits both write back, and repeated GPU runs.
#include <map>
#include <random>

#include "gpu_test_util.h"
#include "runtime/sampling.h"

namespace tide {
namespace {

struct Batch {
  std::vector<float> logits;  // [R, V]
  std::vector<SamplingRow> rows;
  std::vector<int32_t> starts;
  std::vector<HistoryToken> history;
  std::vector<int32_t> mask_index;  // empty: no masks
  std::vector<uint32_t> masks;
  SamplingBatch view() const { return SamplingBatch{rows, starts, history, mask_index, masks}; }
};

// Row r gets parameter mix r % 8; logits are N(0, 3^2), half the rows rounded to bf16 (many ties).
Batch random_batch(int64_t num_rows, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  Batch b;
  b.logits.resize(static_cast<size_t>(num_rows * vocab));
  b.starts.push_back(0);
  for (int64_t r = 0; r < num_rows; ++r) {
    for (int64_t i = 0; i < vocab; ++i) {
      float x = normal(rng);
      if (r % 2 == 1) x = bf16_to_f32(f32_to_bf16(x));
      b.logits[static_cast<size_t>(r * vocab + i)] = x;
    }
    SamplingRow row;
    row.seed = rng();
    row.counter = rng() % 1000;
    row.temperature = 0.5f + 0.25f * static_cast<float>(r % 5);
    switch (r % 8) {
      case 0: row.temperature = 0; break;                                   // greedy
      case 1: break;                                                        // temperature only
      case 2: row.top_k = 1 + static_cast<int32_t>(rng() % 100); break;
      case 3: row.top_p = 0.5f + 0.45f * static_cast<float>(rng() % 100) / 100; break;
      case 4: row.min_p = 0.01f + 0.2f * static_cast<float>(rng() % 100) / 100; break;
      case 5: row.top_k = 50; row.top_p = 0.9f; row.min_p = 0.05f; break;
      case 6: row.top_k = static_cast<int32_t>(vocab) - 1; row.top_p = 0.999f; break;
      default: row.temperature = 0; row.repetition_penalty = 1.3f; break;  // greedy with penalties
    }
    if (r % 3 == 0) {
      row.repetition_penalty = 1.2f;
      row.presence_penalty = 0.4f;
      row.frequency_penalty = 0.3f;
    }
    b.rows.push_back(row);
    // A list of distinct tokens, some of them near the top of the row: counts, and on every third row
    // biases too (the argmax banned, a few tokens banned, raised or lowered, some with counts 0).
    std::map<int32_t, HistoryToken> listed;
    const int n = static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) {
      const int32_t id = token(rng);
      listed[id] = HistoryToken{id, static_cast<int32_t>(rng() % 3), static_cast<int32_t>(rng() % 3)};
    }
    if (r % 3 == 1) {
      const float* row_logits = b.logits.data() + r * vocab;
      const int32_t top = static_cast<int32_t>(std::max_element(row_logits, row_logits + vocab) - row_logits);
      listed[top].id = top;
      listed[top].bias = -INFINITY;
      for (int k = 0; k < 8; ++k) {
        const int32_t id = token(rng);
        listed[id].id = id;
        listed[id].bias = k % 4 == 0   ? -INFINITY
                          : k % 4 == 1 ? -100.0f + 200.0f * static_cast<float>(rng() % 1000) / 1000
                                       : -5.0f + 10.0f * static_cast<float>(rng() % 1000) / 1000;
      }
    }
    for (const auto& [id, h] : listed) {
      b.history.push_back(h);
      if (rng() % 4 == 0) b.logits[static_cast<size_t>(r * vocab + id)] = 12.0f;  // a repeated favourite
    }
    b.starts.push_back(static_cast<int32_t>(b.history.size()));
  }
  return b;
}

void compare(const Batch& b, int64_t num_rows, int64_t vocab) {
  SCOPED_TRACE(::testing::Message() << num_rows << " rows, V " << vocab);
  CpuBackend cpu;
  CudaBackend gpu;
  const Shape shape{num_rows, vocab};
  Tensor l_cpu = cpu.upload(b.logits.data(), DType::kF32, shape);
  Tensor ids_cpu = cpu.alloc(DType::kI32, Shape{num_rows});
  cpu.sample(ids_cpu, l_cpu, b.view());
  const std::vector<int32_t> want(ids_cpu.as<int32_t>(), ids_cpu.as<int32_t>() + num_rows);

  for (int run = 0; run < 2; ++run) {
    Tensor l_gpu = gpu.upload(b.logits.data(), DType::kF32, shape);
    Tensor ids_gpu = gpu.alloc(DType::kI32, Shape{num_rows});
    gpu.sample(ids_gpu, l_gpu, b.view());
    std::vector<int32_t> got(static_cast<size_t>(num_rows));
    gpu.download(ids_gpu, got.data());
    int mismatches = 0;
    for (int64_t r = 0; r < num_rows; ++r) {
      EXPECT_EQ(got[r], want[r]) << "run " << run << " row " << r << " (mix " << r % 8 << ")";
      mismatches += got[r] != want[r];
    }
    EXPECT_EQ(mismatches, 0) << "run " << run;
    // The penalized logits, bit for bit (a NaN-free comparison of the whole rows).
    EXPECT_EQ(test::to_f32(gpu, l_gpu), std::vector<float>(l_cpu.as<float>(), l_cpu.as<float>() + num_rows * vocab));
  }
  // Greedy rows pick the argmax of the penalized logits.
  for (int64_t r = 0; r < num_rows; r += 8) {
    const float* row = l_cpu.as<float>() + r * vocab;
    EXPECT_EQ(want[r], static_cast<int32_t>(std::max_element(row, row + vocab) - row)) << "row " << r;
  }
}

void compare(int64_t num_rows, int64_t vocab, uint32_t seed) {
  compare(random_batch(num_rows, vocab, seed), num_rows, vocab);
}

TEST(CudaSampling, SmallUnalignedVocabularyMatchesCpu) {
  TIDE_REQUIRE_GPU();
  compare(96, 1001, 1);
  compare(40, 4, 2);
}

TEST(CudaSampling, FullVocabularyManyRowsMatchesCpu) {
  TIDE_REQUIRE_GPU();
  compare(64, 256000, 3);
}

// Rows where most tokens are -inf (as given), all but three, or all of them (id 0 on both backends), under
// every parameter mix; the biases of random_batch come on top.
TEST(CudaSampling, MinusInfinityLogitsMatchCpu) {
  TIDE_REQUIRE_GPU();
  for (const int64_t vocab : {int64_t{1001}, int64_t{256000}}) {
    const int64_t num_rows = 32;
    Batch b = random_batch(num_rows, vocab, 5);
    std::mt19937 rng(6);
    for (int64_t r = 0; r < num_rows; ++r) {
      float* row = b.logits.data() + r * vocab;
      const int kind = static_cast<int>(r / 8);  // 8 consecutive rows: every parameter mix
      for (int64_t i = 0; i < vocab; ++i) {
        if (kind == 1 && rng() % 10 != 0) row[i] = -INFINITY;
        if (kind == 2 && i % (vocab / 3) != 1) row[i] = -INFINITY;
        if (kind == 3) row[i] = -INFINITY;
      }
    }
    compare(b, num_rows, vocab);
    CpuBackend cpu;
    Tensor l = cpu.upload(b.logits.data(), DType::kF32, Shape{num_rows, vocab});
    Tensor ids = cpu.alloc(DType::kI32, Shape{num_rows});
    cpu.sample(ids, l, b.view());
    for (int64_t r = 24; r < 32; ++r) EXPECT_EQ(ids.as<int32_t>()[r], 0) << "row " << r;
  }
}

// The thinking budget's forced token (runtime/sampling.h: kForcedTokenBias in the row's list): on every
// parameter mix, with penalties and the list's other biases, both backends pick it.
TEST(CudaSampling, ForcedTokenIsPickedOnEveryMix) {
  TIDE_REQUIRE_GPU();
  for (const int64_t vocab : {int64_t{1001}, int64_t{256000}}) {
    const int64_t num_rows = 24;
    const Batch given = random_batch(num_rows, vocab, 7);
    Batch b = given;
    b.history.clear();
    b.starts.assign(1, 0);
    std::vector<int32_t> forced(static_cast<size_t>(num_rows));
    for (int64_t r = 0; r < num_rows; ++r) {
      // The row's list, its first entry raised to the forced bias (or a new entry), a token far from the top.
      std::vector<HistoryToken> list(given.history.begin() + given.starts[r], given.history.begin() + given.starts[r + 1]);
      const int32_t id = list.empty() ? static_cast<int32_t>((r * 7919) % vocab) : list[0].id;
      if (list.empty()) list.push_back(HistoryToken{id, 0, 0, 0.0f});
      list[0].bias = kForcedTokenBias;
      b.logits[static_cast<size_t>(r * vocab + id)] = -20.0f;
      forced[static_cast<size_t>(r)] = id;
      b.history.insert(b.history.end(), list.begin(), list.end());
      b.starts.push_back(static_cast<int32_t>(b.history.size()));
    }
    compare(b, num_rows, vocab);
    CpuBackend cpu;
    Tensor l = cpu.upload(b.logits.data(), DType::kF32, Shape{num_rows, vocab});
    Tensor ids = cpu.alloc(DType::kI32, Shape{num_rows});
    cpu.sample(ids, l, b.view());
    for (int64_t r = 0; r < num_rows; ++r) EXPECT_EQ(ids.as<int32_t>()[r], forced[static_cast<size_t>(r)]) << "row " << r;
  }
}

// Allowed-token masks (structured outputs): random masks of every density, shared by some rows, others free,
// on every parameter mix with the biases and penalties of random_batch.
TEST(CudaSampling, MaskedRowsMatchCpu) {
  TIDE_REQUIRE_GPU();
  for (const int64_t vocab : {int64_t{1001}, int64_t{256000}}) {
    const int64_t num_rows = 48;
    Batch b = random_batch(num_rows, vocab, 8);
    std::mt19937 rng(9);
    const int64_t words = mask_words(vocab);
    const int num_masks = 5;
    for (int m = 0; m < num_masks; ++m) {
      // Densities from one token in a thousand to nearly all.
      const uint32_t keep_in_1024 = m == 0 ? 1 : m == 1 ? 16 : m == 2 ? 256 : m == 3 ? 900 : 1023;
      for (int64_t w = 0; w < words; ++w) {
        uint32_t bits = 0;
        for (int j = 0; j < 32; ++j) bits |= (rng() % 1024 < keep_in_1024 ? 1u : 0u) << j;
        b.masks.push_back(bits);
      }
      b.masks[static_cast<size_t>(m * words)] |= 1u;  // at least one allowed token
    }
    for (int64_t r = 0; r < num_rows; ++r) b.mask_index.push_back(r % 7 == 6 ? -1 : static_cast<int32_t>(r % num_masks));
    compare(b, num_rows, vocab);
  }
}

// Speculative sampling (sample_with_drafts): rows of every parameter mix checking drafts whose logits are the
// row's own plus noise (drafts drawn from them: mostly accepted) or unrelated (drafted ids drawn from them or
// uniformly: mostly refused, then drawn from the residual), some rows without a draft, some masked. The CUDA
// ids must be the CPU reference's, run after run, and both paths (accepted, residual) must occur.
TEST(CudaSampling, DraftsMatchCpu) {
  TIDE_REQUIRE_GPU();
  for (const int64_t vocab : {int64_t{1001}, int64_t{256000}}) {
    SCOPED_TRACE(::testing::Message() << "V " << vocab);
    const int64_t num_rows = 64, num_drafts = 56;
    Batch b = random_batch(num_rows, vocab, 11);
    const Batch q = random_batch(num_drafts, vocab, 12);
    std::mt19937 rng(13);
    std::normal_distribution<float> noise(0.0f, 0.5f);
    std::vector<float> q_logits(q.logits);
    std::vector<SamplingRow> q_rows(q.rows);
    for (int64_t j = 0; j < num_drafts; ++j) {
      if (q_rows[j].temperature == 0) q_rows[j].temperature = 0.8f;
      q_rows[j].seed = rng();
      if (j % 2 == 0) {  // close to the row that checks it (row j)
        for (int64_t i = 0; i < vocab; ++i) q_logits[j * vocab + i] = b.logits[j * vocab + i] + noise(rng);
      }
    }
    // Drafted ids: drawn from q (CPU), except every fourth, uniform.
    CpuBackend cpu;
    std::vector<int32_t> q_ids(static_cast<size_t>(num_drafts));
    {
      Tensor l = cpu.upload(q_logits.data(), DType::kF32, Shape{num_drafts, vocab});
      Tensor ids = cpu.alloc(DType::kI32, Shape{num_drafts});
      cpu.sample(ids, l, SamplingBatch{q_rows});
      for (int64_t j = 0; j < num_drafts; ++j) {
        q_ids[j] = j % 4 == 3 ? static_cast<int32_t>(rng() % vocab) : ids.as<int32_t>()[j];
      }
    }
    std::vector<int32_t> index(static_cast<size_t>(num_rows));
    for (int64_t r = 0; r < num_rows; ++r) index[r] = r < num_drafts && r % 9 != 8 ? static_cast<int32_t>(r) : -1;
    const int64_t words = mask_words(vocab);
    for (int64_t w = 0; w < words; ++w) b.masks.push_back(static_cast<uint32_t>(rng()) | 1u);  // about half allowed
    for (int64_t r = 0; r < num_rows; ++r) b.mask_index.push_back(r % 5 == 4 ? 0 : -1);

    const Shape shape{num_rows, vocab};
    Tensor l_cpu = cpu.upload(b.logits.data(), DType::kF32, shape);
    Tensor ids_cpu = cpu.alloc(DType::kI32, Shape{num_rows});
    Tensor q_cpu = cpu.upload(q_logits.data(), DType::kF32, Shape{num_drafts, vocab});
    cpu.sample_with_drafts(ids_cpu, l_cpu, b.view(), DraftSampling{q_cpu, q_rows, q_ids, index});
    const std::vector<int32_t> want(ids_cpu.as<int32_t>(), ids_cpu.as<int32_t>() + num_rows);
    int accepted = 0, refused = 0;
    for (int64_t r = 0; r < num_rows; ++r) {
      if (index[r] < 0 || b.rows[r].temperature == 0) continue;
      (want[r] == q_ids[index[r]] ? accepted : refused) += 1;
    }
    EXPECT_GT(accepted, 5);
    EXPECT_GT(refused, 5);

    CudaBackend gpu;
    Tensor q_gpu = gpu.upload(q_logits.data(), DType::kF32, Shape{num_drafts, vocab});
    for (int run = 0; run < 2; ++run) {
      Tensor l_gpu = gpu.upload(b.logits.data(), DType::kF32, shape);
      Tensor ids_gpu = gpu.alloc(DType::kI32, Shape{num_rows});
      gpu.sample_with_drafts(ids_gpu, l_gpu, b.view(), DraftSampling{q_gpu, q_rows, q_ids, index});
      std::vector<int32_t> got(static_cast<size_t>(num_rows));
      gpu.download(ids_gpu, got.data());
      for (int64_t r = 0; r < num_rows; ++r) {
        EXPECT_EQ(got[r], want[r]) << "run " << run << " row " << r << " (mix " << r % 8 << ", draft " << index[r] << ")";
      }
      EXPECT_EQ(test::to_f32(gpu, q_gpu), q_logits) << "the draft's logits are not modified";
    }
  }
}

TEST(CudaSampling, NoHistoryAndEmptyBatch) {
  TIDE_REQUIRE_GPU();
  CpuBackend cpu;
  CudaBackend gpu;
  Batch b = random_batch(16, 3000, 4);
  for (SamplingRow& r : b.rows) r.repetition_penalty = 1, r.presence_penalty = 0, r.frequency_penalty = 0;
  const SamplingBatch view{b.rows, {}, {}};
  Tensor l_cpu = cpu.upload(b.logits.data(), DType::kF32, Shape{16, 3000});
  Tensor l_gpu = gpu.upload(b.logits.data(), DType::kF32, Shape{16, 3000});
  Tensor ids_cpu = cpu.alloc(DType::kI32, Shape{16}), ids_gpu = gpu.alloc(DType::kI32, Shape{16});
  cpu.sample(ids_cpu, l_cpu, view);
  gpu.sample(ids_gpu, l_gpu, view);
  std::vector<int32_t> got(16);
  gpu.download(ids_gpu, got.data());
  EXPECT_EQ(got, std::vector<int32_t>(ids_cpu.as<int32_t>(), ids_cpu.as<int32_t>() + 16));
  gpu.sample(gpu.alloc(DType::kI32, Shape{0}), gpu.alloc(DType::kF32, Shape{0, 3000}), SamplingBatch{});
}

}  // namespace
}  // namespace tide
