// The CUDA backend's KV cache ops: RoPE with the store, the store, paged attention, and the block copies
// between the device cache and the host tier.
#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/tensor_args.h"

namespace tide {

using cuda::bf;
using cuda::bf16;
using cuda::typed;

namespace {

// The store's parameters for `layer` of `kv` (a bf16 cache, or an FP8 cache's codes and scales), without the
// RoPE inputs.
cuda::KvStoreParams kv_store_params(KvStorage& kv, int64_t layer, const Tensor& qkv, const Tensor& slot_mapping,
                                    const AttentionShape& shape) {
  TIDE_CHECK(qkv.dim(1) == (shape.num_heads + 2 * shape.num_heads_kv) * shape.head_dim &&
             slot_mapping.numel() == qkv.dim(0));
  TIDE_CHECK(layer >= 0 && layer < kv.num_layers);
  return {.cache = kv.fp8() ? nullptr : bf(kv.data, "KV cache"),
          .codes = kv.fp8() ? static_cast<uint8_t*>(kv.data.data) : nullptr,
          .scales = kv.fp8() ? typed<float>(kv.scales, DType::kF32, "KV scales") : nullptr,
          .qkv = bf(qkv, "qkv"),
          .slot_mapping = typed<int64_t>(slot_mapping, DType::kI64, "slots"),
          .num_tokens = qkv.dim(0),
          .num_heads = shape.num_heads,
          .num_heads_kv = shape.num_heads_kv,
          .head_dim = shape.head_dim,
          .num_layers = kv.num_layers,
          .layer = layer,
          .block_size = kv.block_size};
}

}  // namespace

// qkv: [T, (Hq + 2 Hkv) * D], positions, slot_mapping: [T], inv_freq: [D / 2]
void CudaBackend::rope_store_kv(KvStorage& kv, int64_t layer, Tensor qkv, const Tensor& positions,
                                const Tensor& inv_freq, const Tensor& slot_mapping, const AttentionShape& shape) {
  const int64_t d = shape.head_dim;
  TIDE_CHECK(positions.numel() == qkv.dim(0) && 2 * inv_freq.numel() == d && d % 2 == 0);
  cuda::KvStoreParams p = kv_store_params(kv, layer, qkv, slot_mapping, shape);
  p.positions = typed<int32_t>(positions, DType::kI32, "positions");
  p.inv_freq = typed<float>(inv_freq, DType::kF32, "inv_freq");
  cuda::launch_rope_store_kv(p, stream_);
}

// qkv: [T, (Hq + 2 Hkv) * D], slot_mapping: [T]
void CudaBackend::store_kv(KvStorage& kv, int64_t layer, const Tensor& qkv, const Tensor& slot_mapping,
                           const AttentionShape& shape) {
  cuda::launch_store_kv(kv_store_params(kv, layer, qkv, slot_mapping, shape), stream_);
}

// out: [T, Hq * D], qkv: [T, (Hq + 2 Hkv) * D]
void CudaBackend::attention(Tensor out, const Tensor& qkv, const KvStorage& kv, int64_t layer,
                            const AttentionBatch& batch, const AttentionShape& shape, int64_t window) {
  const int64_t group = shape.num_heads / shape.num_heads_kv;
  const bool mma = cuda::mma_attention_supports(shape.head_dim);
  if (!mma && !cuda::paged_attention_supports(shape.head_dim, group)) {
    fail("cuda backend: attention with head_dim {} and {} query heads per KV head is not supported (head_dim 64, "
         "128, 256, or at most 256 with at most 16 query heads per KV head)", shape.head_dim, group);
  }
  if (kv.fp8() && !mma) {
    fail("cuda backend: an FP8 KV cache needs head_dim 64, 128 or 256 (the tensor-core attention), got {}",
         shape.head_dim);
  }
  TIDE_CHECK(qkv.dim(1) == (shape.num_heads + 2 * shape.num_heads_kv) * shape.head_dim);
  TIDE_CHECK(out.dim(1) == shape.num_heads * shape.head_dim && batch.block_size == kv.block_size);
  // The kernels index cache rows (one token's K or V of one layer) and positions with 32-bit integers.
  TIDE_CHECK(kv.data.dim(0) * kv.num_layers * 2 * kv.block_size < (int64_t{1} << 31));
  TIDE_CHECK(batch.max_position < (int64_t{1} << 30) && qkv.dim(0) * shape.num_heads < (int64_t{1} << 31));
  cuda::PagedAttentionParams p{};
  p.out = bf(out, "attention output");
  p.qkv = bf(qkv, "qkv");
  if (kv.fp8()) {
    p.cache8 = static_cast<const uint8_t*>(kv.data.data);
    p.scales = typed<float>(kv.scales, DType::kF32, "KV cache scales");
  } else {
    p.cache = bf(kv.data, "KV cache");
  }
  p.positions = typed<int32_t>(batch.positions, DType::kI32, "positions");
  p.seq_starts = typed<int32_t>(batch.seq_starts, DType::kI32, "seq_starts");
  p.block_tables = typed<int32_t>(batch.block_tables, DType::kI32, "block tables");
  p.num_tokens = qkv.dim(0);
  p.num_seqs = batch.seq_starts.numel() - 1;
  p.max_blocks = batch.block_tables.dim(1);
  p.num_heads = shape.num_heads;
  p.num_heads_kv = shape.num_heads_kv;
  p.head_dim = shape.head_dim;
  p.num_layers = kv.num_layers;
  p.layer = layer;
  p.block_size = kv.block_size;
  p.block_div = FastDivmod::make(static_cast<uint32_t>(kv.block_size));
  p.num_blocks = kv.data.dim(0);
  p.window = window;
  p.scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  if (mma) {
    // Few new tokens per sequence: one CTA per token (or per few tokens of a sequence), split over the keys.
    // Otherwise row tiles of one sequence's tokens, which read each K/V tile once for all of them. A step that
    // prefills some sequences and decodes others gives each kind its kernel, through the decode-first order: a
    // decode's one query row would otherwise take a whole row tile of the prefill kernel (32 rows per KV head
    // for a group of 4), and every sequence as many row tiles as the longest chunk.
    const bool decode_ok = cuda::mma_decode_supports(shape.head_dim, group);
    const auto decode = [&](cuda::PagedAttentionParams dp, int64_t max_seq_tokens) {
      const bool listed = dp.seq_list != nullptr;
      const int64_t ctas =
          cuda::mma_decode_ctas(shape.head_dim, dp.num_tokens, dp.num_seqs, group, max_seq_tokens, listed);
      const int64_t max_keys = cuda::mma_decode_max_keys(window, batch.max_position, max_seq_tokens);
      const cuda::DecodePlan plan = cuda::mma_decode_plan(ctas, dp.num_heads_kv, max_keys, num_sms_, shape.head_dim,
                                                          group, max_seq_tokens, decode_ctas_per_sm_);
      const int64_t slot_tokens =
          cuda::mma_decode_slot_tokens(shape.head_dim, dp.num_tokens, dp.num_seqs, group, max_seq_tokens, listed);
      const int64_t slots = plan.splits > 1 ? slot_tokens * dp.num_heads * plan.splits : 1;
      // Every slot is written before the merge reads it (an empty split writes its (max, sum) as (-inf, 0)):
      // no memset in front of the kernel.
      const Tensor part_out = alloc_scratch(DType::kF32, Shape{slots, shape.head_dim});
      const Tensor part_ml = alloc_scratch(DType::kF32, Shape{slots, 2});
      cuda::launch_mma_decode(dp, max_keys, max_seq_tokens, part_out.as<float>(), part_ml.as<float>(), plan,
                              stream_);
    };
    // Over an FP8 cache, the blocks the prefill reads dequantized into bf16 scratch (exactly) and the bf16
    // kernel on them, where the scratch fits and no graph is being recorded (a graph would keep this step's
    // scratch size): the FP8 kernels' per-key scales and split queries cost more on the softmax's path than
    // one pass over the blocks (8K tokens, R7B's heads: 1-2% slower than over a bf16 cache, the FP8 wgmma
    // kernel 18-19%).
    const auto prefill = [&](cuda::PagedAttentionParams pp) {
      Tensor scratch, tables;
      if (pp.cache8 != nullptr && fp8_kv_prefill_dequantize_ && !capturing_) {
        const int64_t blocks = cuda::kv_dequantize_scratch_blocks(pp, batch.max_position, batch.max_seq_tokens);
        const int64_t block_elems = 2 * kv.block_size * shape.num_heads_kv * shape.head_dim;
        if (blocks > 0 && blocks <= kFp8KvPrefillScratchBytes / (block_elems * 2)) {
          scratch = alloc_scratch(DType::kBF16, Shape{blocks, block_elems});
          tables = alloc_scratch(DType::kI32, Shape{batch.block_tables.dim(0), pp.max_blocks});
          cuda::launch_kv_dequantize_for_prefill(pp, batch.max_position, batch.max_seq_tokens, scratch.as<bf16>(),
                                                 blocks, tables.as<int32_t>(), stream_);
          pp.cache = scratch.as<bf16>();
          pp.cache8 = nullptr;
          pp.scales = nullptr;
          pp.block_tables = tables.as<int32_t>();
          pp.num_layers = 1;
          pp.layer = 0;
          pp.num_blocks = blocks;
        }
      }
      cuda::launch_mma_prefill(pp, batch.max_seq_tokens, prefill_kernel_, stream_);
    };
    if (batch.max_seq_tokens <= kDecodeSeqTokens && decode_ok) {
      decode(p, batch.max_seq_tokens);
    } else if (decode_ok && batch.num_decode_seqs > 0 && batch.num_decode_seqs < p.num_seqs &&
               batch.seq_order.numel() == p.num_seqs) {
      const int32_t* order = typed<int32_t>(batch.seq_order, DType::kI32, "seq_order");
      cuda::PagedAttentionParams dp = p, pp = p;
      dp.seq_list = order;
      dp.num_seqs = batch.num_decode_seqs;
      pp.seq_list = order + batch.num_decode_seqs;
      pp.num_seqs = p.num_seqs - batch.num_decode_seqs;
      decode(dp, batch.max_decode_seq_tokens);
      prefill(pp);
    } else {
      prefill(p);
    }
    return;
  }
  const int64_t max_keys = window == 0 ? batch.max_position + 1 : std::min(window, batch.max_position + 1);
  const int splits = cuda::paged_attention_splits(p.num_tokens, p.num_heads_kv, max_keys, num_sms_);
  const int64_t slots = p.num_tokens * p.num_heads * splits;
  const Tensor part_out = alloc(DType::kF32, Shape{slots, shape.head_dim});
  const Tensor part_ml = alloc(DType::kF32, Shape{slots, 2});
  cuda::launch_paged_attention(p, part_out.as<float>(), part_ml.as<float>(), splits, stream_);
}

bool CudaBackend::supports_fp8_kv(int64_t head_dim) const { return cuda::mma_attention_supports(head_dim); }

void CudaBackend::copy_blocks(KvStorage& device, Tensor& host, std::span<const BlockCopy> copies) {
  // One stream, in order: an eviction lands before a later copy or kernel reuses its block or slot.
  const auto copy = [&](unsigned char* part, unsigned char* h, size_t bytes, bool to_host) {
    TIDE_CUDA_CHECK(to_host ? cudaMemcpyAsync(h, part, bytes, cudaMemcpyDeviceToHost, stream_)
                            : cudaMemcpyAsync(part, h, bytes, cudaMemcpyHostToDevice, stream_));
  };
  for_each_block_part_copy(device, host, copies, copy);
}

}  // namespace tide
