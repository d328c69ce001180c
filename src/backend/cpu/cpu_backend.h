// CpuBackend: the reference implementation of every op. Reference, not fast: plain loops with f32
// storage and f32 accumulation (OpenBLAS sgemm for matmul), written to be read next to
// docs/design/cohere2-numerics.md.
// Other backends are tested against these ops.
#pragma once

#include "backend/backend.h"

namespace tide {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  // Host memory; an allocation that cannot be made throws OutOfMemoryError naming the bytes asked for and
  // the bytes available.
  Tensor alloc(DType dtype, Shape shape) override;
  Tensor alloc_host(DType dtype, Shape shape) override;
  void upload_into_as(Tensor t, const void* host, DType host_dtype) override;
  void upload_into(Tensor t, const void* host) override;
  void download(const Tensor& t, void* host) override;
  DType weight_dtype() const override { return DType::kF32; }
  DType activation_dtype() const override { return DType::kF32; }

  void embedding(Tensor out, const Tensor& table, const Tensor& ids) override;
  void gather_rows(Tensor out, const Tensor& x, const Tensor& rows) override;
  void layer_norm(Tensor out, const Tensor& x, const Tensor& weight, float eps) override;
  void matmul(Tensor out, const Tensor& x, const Tensor& w, float alpha) override;
  void rope(Tensor qkv, const Tensor& positions, const Tensor& inv_freq, int64_t num_rope_heads) override;
  void store_kv(KvStorage& kv, int64_t layer, const Tensor& qkv, const Tensor& slot_mapping,
                const AttentionShape& shape) override;
  void attention(Tensor out, const Tensor& qkv, const KvStorage& kv, int64_t layer, const AttentionBatch& batch,
                 const AttentionShape& shape, int64_t window) override;
  void silu_mul(Tensor out, const Tensor& gate_up) override;
  void add(Tensor out, const Tensor& a, const Tensor& b) override;
  void copy(Tensor out, const Tensor& x) override;
  void fill_uniform(Tensor t, float center, float amplitude, uint64_t seed) override;
  bool supports_fp8() const override { return true; }
  bool supports_fp8_kv(int64_t) const override { return true; }
  // Rows split over host threads when there are many (a weight quantized at load); each row as quantize_row.
  void quantize_fp8(Tensor out8, Tensor scales, const Tensor& x) override;
  void matmul_fp8(Tensor out, const Tensor& x8, const Tensor& x_scales, const Tensor& w8, const Tensor& w_scales,
                  float alpha) override;
  void sample(Tensor out_ids, Tensor logits, const SamplingBatch& batch) override;
  bool supports_draft_sampling() const override { return true; }
  void sample_with_drafts(Tensor out_ids, Tensor logits, const SamplingBatch& batch, const DraftSampling& drafts) override;
  void logprobs(Tensor out_values, Tensor out_ids, const Tensor& logits, const Tensor& chosen_ids, int n) override;
  void copy_blocks(KvStorage& device, Tensor& host, std::span<const BlockCopy> copies) override;
};

}  // namespace tide
