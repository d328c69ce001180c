// AblationBackend: a Backend that forwards every op to a CudaBackend except the op groups it is told to
// skip. The decode benchmark times a step with one group skipped at a time: the difference to the full
// step is what that group costs in the real launch sequence (inside the decode CUDA graph, with its launch
// gaps), which timing the ops one by one in isolation would not show. Outputs of skipped ops are garbage;
// only for timing.
#pragma once

#include <set>
#include <string>

#include "backend/cuda/cuda_backend.h"

namespace tide::bench {

// Op groups: "norm" (layer_norm and its residual / FP8 fusions), "quantize" (quantize_fp8), "silu"
// (silu_mul, silu_mul_fp8), "linear" (the layers' matmul / matmul_fp8; not the logits matmul, which has
// F32 output), "logits" (the logits matmul), "rope_kv" (rope, store_kv, rope_store_kv), "attention".
inline const std::set<std::string>& ablation_groups() {
  static const std::set<std::string> groups{"norm", "quantize", "silu", "linear", "logits", "rope_kv", "attention"};
  return groups;
}

class AblationBackend final : public Backend {
 public:
  // overlap false: the side_* calls are dropped, so the step's two chains run one after the other.
  AblationBackend(CudaBackend& inner, std::set<std::string> skip, bool overlap = true)
      : inner_(inner), skip_(std::move(skip)), overlap_(overlap) {}

  std::string name() const override { return inner_.name(); }
  Tensor alloc(DType dtype, Shape shape) override { return inner_.alloc(dtype, std::move(shape)); }
  Tensor alloc_host(DType dtype, Shape shape) override { return inner_.alloc_host(dtype, std::move(shape)); }
  Tensor upload_as(const void* host, DType host_dtype, Shape shape, DType dtype) override {
    return inner_.upload_as(host, host_dtype, std::move(shape), dtype);
  }
  void upload_into(Tensor t, const void* host) override { inner_.upload_into(std::move(t), host); }
  void download(const Tensor& t, void* host) override { inner_.download(t, host); }
  DType weight_dtype() const override { return inner_.weight_dtype(); }
  DType activation_dtype() const override { return inner_.activation_dtype(); }
  std::optional<MemoryInfo> memory_info() const override { return inner_.memory_info(); }
  bool supports_fp8() const override { return inner_.supports_fp8(); }
  void bind_thread() override { inner_.bind_thread(); }
  std::unique_ptr<Graph> capture(const std::function<void()>& body) override { return inner_.capture(body); }
  void side_begin() override {
    if (overlap_) inner_.side_begin();
  }
  void side_end() override {
    if (overlap_) inner_.side_end();
  }
  void side_join() override {
    if (overlap_) inner_.side_join();
  }

  void embedding(Tensor out, const Tensor& table, const Tensor& ids) override { inner_.embedding(out, table, ids); }
  void gather_rows(Tensor out, const Tensor& x, const Tensor& rows) override { inner_.gather_rows(out, x, rows); }
  void layer_norm(Tensor out, const Tensor& x, const Tensor& weight, float eps) override {
    if (!skips("norm")) inner_.layer_norm(out, x, weight, eps);
  }
  void residual_layer_norm(Tensor h, const Tensor& a, const Tensor& b, Tensor out, const Tensor& weight,
                           float eps) override {
    if (!skips("norm")) inner_.residual_layer_norm(h, a, b, out, weight, eps);
  }
  void matmul(Tensor out, const Tensor& x, const Tensor& w, float alpha) override {
    if (!skips(out.dtype == DType::kF32 ? "logits" : "linear")) inner_.matmul(out, x, w, alpha);
  }
  void quantize_fp8(Tensor out8, Tensor scales, const Tensor& x) override {
    if (!skips("quantize")) inner_.quantize_fp8(out8, scales, x);
  }
  void layer_norm_fp8(Tensor out8, Tensor scales, const Tensor& x, const Tensor& weight, float eps,
                      Tensor scratch) override {
    if (!skips("norm")) inner_.layer_norm_fp8(out8, scales, x, weight, eps, scratch);
  }
  void residual_layer_norm_fp8(Tensor h, const Tensor& a, const Tensor& b, Tensor out8, Tensor scales,
                               const Tensor& weight, float eps, Tensor scratch) override {
    if (!skips("norm")) inner_.residual_layer_norm_fp8(h, a, b, out8, scales, weight, eps, scratch);
  }
  void silu_mul_fp8(Tensor out8, Tensor scales, const Tensor& gate_up, Tensor scratch) override {
    if (!skips("silu")) inner_.silu_mul_fp8(out8, scales, gate_up, scratch);
  }
  void matmul_fp8(Tensor out, const Tensor& x8, const Tensor& x_scales, const Tensor& w8, const Tensor& w_scales,
                  float alpha) override {
    if (!skips("linear")) inner_.matmul_fp8(out, x8, x_scales, w8, w_scales, alpha);
  }
  void rope(Tensor qkv, const Tensor& positions, const Tensor& inv_freq, int64_t num_rope_heads) override {
    if (!skips("rope_kv")) inner_.rope(qkv, positions, inv_freq, num_rope_heads);
  }
  void store_kv(KvStorage& kv, int64_t layer, const Tensor& qkv, const Tensor& slot_mapping,
                const AttentionShape& shape) override {
    if (!skips("rope_kv")) inner_.store_kv(kv, layer, qkv, slot_mapping, shape);
  }
  void rope_store_kv(KvStorage& kv, int64_t layer, Tensor qkv, const Tensor& positions, const Tensor& inv_freq,
                     const Tensor& slot_mapping, const AttentionShape& shape) override {
    if (!skips("rope_kv")) inner_.rope_store_kv(kv, layer, qkv, positions, inv_freq, slot_mapping, shape);
  }
  void attention(Tensor out, const Tensor& qkv, const KvStorage& kv, int64_t layer, const AttentionBatch& batch,
                 const AttentionShape& shape, int64_t window) override {
    if (!skips("attention")) inner_.attention(out, qkv, kv, layer, batch, shape, window);
  }
  void silu_mul(Tensor out, const Tensor& gate_up) override {
    if (!skips("silu")) inner_.silu_mul(out, gate_up);
  }
  void add(Tensor out, const Tensor& a, const Tensor& b) override { inner_.add(out, a, b); }
  void copy(Tensor out, const Tensor& x) override { inner_.copy(out, x); }
  void sample(Tensor out_ids, Tensor logits, const SamplingBatch& batch) override { inner_.sample(out_ids, logits, batch); }
  void logprobs(Tensor out_values, Tensor out_ids, const Tensor& logits, const Tensor& chosen_ids, int n) override {
    inner_.logprobs(out_values, out_ids, logits, chosen_ids, n);
  }
  void copy_blocks(KvStorage& device, Tensor& host, std::span<const BlockCopy> copies) override {
    inner_.copy_blocks(device, host, copies);
  }

 private:
  bool skips(const char* group) const { return skip_.count(group) > 0; }

  CudaBackend& inner_;
  std::set<std::string> skip_;
  bool overlap_ = true;
};

}  // namespace tide::bench
