// Reference paged attention and KV store of the CPU backend. Reference, not fast: one query token and one
// head at a time, two passes (scores, then softmax-weighted values), f32 throughout. FP8 KV storage holds
// each stored vector's codes and scale (backend.h, KvStorage); attention reads code x scale.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/attention_window.h"
#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/fp8.h"

namespace tide {
namespace {

// Offset (in floats) of K (kv_idx 0) or V (kv_idx 1) for `slot` of `layer` in a group's storage
// [num_blocks, num_layers, 2, block_size, num_heads_kv, D].
int64_t kv_offset(const KvStorage& kv, int64_t layer, int kv_idx, int64_t block, int64_t offset,
                  const AttentionShape& shape) {
  const int64_t token_size = shape.num_heads_kv * shape.head_dim;
  return (((block * kv.num_layers + layer) * 2 + kv_idx) * kv.block_size + offset) * token_size;
}

int64_t num_blocks_of(const KvStorage& kv) { return kv.data.dim(0); }

// Index of the scale of head `head`'s K (kv_idx 0) or V vector at `slot` of `layer` in FP8 storage's scales
// [num_blocks, num_layers, 2, num_heads_kv, block_size].
int64_t scale_index(const KvStorage& kv, int64_t layer, int kv_idx, int64_t block, int64_t offset, int64_t head,
                    int64_t num_heads_kv) {
  return (((block * kv.num_layers + layer) * 2 + kv_idx) * num_heads_kv + head) * kv.block_size + offset;
}

// The D values one stored FP8 vector stands for: e4m3(code) x scale, in f32.
void dequantize_vector(const uint8_t* codes, float scale, int64_t d, float* out) {
  for (int64_t i = 0; i < d; ++i) out[i] = fp8::e4m3_to_float(codes[i]) * scale;
}

}  // namespace

// qkv: [T, (Hq + 2 Hkv) * D], slot_mapping: [T] i64
void CpuBackend::store_kv(KvStorage& kv, int64_t layer, const Tensor& qkv, const Tensor& slot_mapping,
                          const AttentionShape& shape) {
  TIDE_CHECK(slot_mapping.dtype == DType::kI64 && slot_mapping.numel() == qkv.dim(0));
  TIDE_CHECK(layer >= 0 && layer < kv.num_layers);
  const int64_t d = shape.head_dim, kv_size = shape.num_heads_kv * d;
  const int64_t row_size = (shape.num_heads + 2 * shape.num_heads_kv) * d;
  TIDE_CHECK(qkv.dim(1) == row_size);
  for (int64_t t = 0; t < qkv.dim(0); ++t) {
    const int64_t slot = slot_mapping.as<int64_t>()[t];
    if (slot < 0) continue;  // padding
    const int64_t block = slot / kv.block_size, offset = slot % kv.block_size;
    TIDE_CHECK(block < num_blocks_of(kv));
    const float* k = qkv.as<float>() + t * row_size + shape.num_heads * d;
    for (int kv_idx = 0; kv_idx < 2; ++kv_idx) {
      const float* x = k + kv_idx * kv_size;
      const int64_t at = kv_offset(kv, layer, kv_idx, block, offset, shape);
      if (!kv.fp8()) {
        std::memcpy(kv.data.as<float>() + at, x, sizeof(float) * kv_size);
        continue;
      }
      for (int64_t head = 0; head < shape.num_heads_kv; ++head) {
        const int64_t scale_at = scale_index(kv, layer, kv_idx, block, offset, head, shape.num_heads_kv);
        kv.scales.as<float>()[scale_at] =
            fp8::quantize_row(x + head * d, d, static_cast<uint8_t*>(kv.data.data) + at + head * d, /*kv=*/true);
      }
    }
  }
}

void CpuBackend::copy_blocks(KvStorage& device, Tensor& host, std::span<const BlockCopy> copies) {
  const auto copy = [](unsigned char* part, unsigned char* h, size_t bytes, bool to_host) {
    to_host ? std::memcpy(h, part, bytes) : std::memcpy(part, h, bytes);
  };
  for_each_block_part_copy(device, host, copies, copy);
}

// out: [T, Hq * D], qkv: [T, (Hq + 2 Hkv) * D]
void CpuBackend::attention(Tensor out, const Tensor& qkv, const KvStorage& kv, int64_t layer,
                           const AttentionBatch& batch, const AttentionShape& shape, int64_t window) {
  const int64_t d = shape.head_dim;
  const int64_t row_size = (shape.num_heads + 2 * shape.num_heads_kv) * d;
  const int64_t heads_per_kv = shape.num_heads / shape.num_heads_kv;
  const int64_t num_seqs = batch.seq_starts.numel() - 1;
  const int64_t max_blocks = batch.block_tables.dim(1);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  TIDE_CHECK(qkv.dim(1) == row_size && out.dim(1) == shape.num_heads * d);
  TIDE_CHECK(batch.block_tables.dim(0) == num_seqs && batch.block_size == kv.block_size);
  const int32_t* starts = batch.seq_starts.as<int32_t>();
  const int32_t* positions = batch.positions.as<int32_t>();

  std::vector<float> scores, dequantized(static_cast<size_t>(d));
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int32_t* table = batch.block_tables.as<int32_t>() + s * max_blocks;
    for (int64_t t = starts[s]; t < starts[s + 1]; ++t) {
      const int64_t pos = positions[t];
      const int64_t first = std::max<int64_t>(0, window_first_key(pos, window));
      TIDE_CHECK(pos / kv.block_size < max_blocks);
      if (table[pos / kv.block_size] == kNullBlock) {
        // A padding row (Cohere2Model pads decode batches to a graph's size: null table, slot -1): a real
        // token's own block always exists, since its K/V were just stored there. Nothing to read.
        std::fill_n(out.as<float>() + t * shape.num_heads * d, shape.num_heads * d, 0.0f);
        continue;
      }
      scores.resize(static_cast<size_t>(pos - first + 1));
      for (int64_t h = 0; h < shape.num_heads; ++h) {
        const int64_t kv_head = h / heads_per_kv;
        const float* q = qkv.as<float>() + t * row_size + h * d;
        // The stored K (kv_idx 0) or V vector of this head at key_pos, as f32 (valid until the next call).
        auto slot_of = [&](int64_t key_pos, int kv_idx) -> const float* {
          const int32_t block = table[key_pos / kv.block_size];
          TIDE_CHECK(block != kNullBlock && block < num_blocks_of(kv));
          const int64_t offset = key_pos % kv.block_size, at = kv_offset(kv, layer, kv_idx, block, offset, shape);
          if (!kv.fp8()) return kv.data.as<float>() + at + kv_head * d;
          const float scale =
              kv.scales.as<float>()[scale_index(kv, layer, kv_idx, block, offset, kv_head, shape.num_heads_kv)];
          dequantize_vector(static_cast<const uint8_t*>(kv.data.data) + at + kv_head * d, scale, d,
                            dequantized.data());
          return dequantized.data();
        };
        float max_score = -INFINITY;
        for (int64_t key_pos = first; key_pos <= pos; ++key_pos) {
          const float* k = slot_of(key_pos, 0);
          float dot = 0;
          for (int64_t i = 0; i < d; ++i) dot += q[i] * k[i];
          scores[static_cast<size_t>(key_pos - first)] = dot * scale;
          max_score = std::max(max_score, dot * scale);
        }
        float denom = 0;
        for (float& score : scores) {
          score = std::exp(score - max_score);
          denom += score;
        }
        float* o = out.as<float>() + t * shape.num_heads * d + h * d;
        std::fill(o, o + d, 0.0f);
        for (int64_t key_pos = first; key_pos <= pos; ++key_pos) {
          const float p = scores[static_cast<size_t>(key_pos - first)] / denom;
          const float* v = slot_of(key_pos, 1);
          for (int64_t i = 0; i < d; ++i) o[i] += p * v[i];
        }
      }
    }
  }
}

}  // namespace tide
