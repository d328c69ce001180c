// AblationBackend: a Backend that forwards every op to another (the benchmark's CudaBackend) except the op
// groups it is told to skip. The decode benchmark times a step with one group skipped at a time: the
// difference to the full step is what that group costs in the real launch sequence (inside the decode CUDA
// graph, with its launch gaps), which timing the ops one by one in isolation would not show. Outputs of
// skipped ops are garbage; only for timing.
#pragma once

#include <set>
#include <string>

#include "backend/forwarding_backend.h"

namespace tide::bench {

// Op groups: "norm" (layer_norm and its residual / FP8 fusions), "quantize" (quantize_fp8), "silu"
// (silu_mul, silu_mul_fp8), "linear" (the layers' matmul / matmul_fp8; not the logits matmul, which has
// F32 output), "logits" (the logits matmul), "rope_kv" (rope, store_kv, rope_store_kv), "attention".
inline const std::set<std::string>& ablation_groups() {
  static const std::set<std::string> groups{"norm", "quantize", "silu", "linear", "logits", "rope_kv", "attention"};
  return groups;
}

class AblationBackend final : public ForwardingBackend {
 public:
  // overlap false: the side_* calls are dropped, so the step's two chains run one after the other.
  AblationBackend(Backend& inner, std::set<std::string> skip, bool overlap = true)
      : ForwardingBackend(inner), skip_(std::move(skip)), overlap_(overlap) {}

  void side_begin() override {
    if (overlap_) inner().side_begin();
  }
  void side_end() override {
    if (overlap_) inner().side_end();
  }
  void side_join() override {
    if (overlap_) inner().side_join();
  }

  void layer_norm(Tensor out, const Tensor& x, const Tensor& weight, float eps) override {
    if (!skips("norm")) inner().layer_norm(out, x, weight, eps);
  }
  void residual_layer_norm(Tensor h, const Tensor& a, const Tensor& b, Tensor out, const Tensor& weight,
                           float eps) override {
    if (!skips("norm")) inner().residual_layer_norm(h, a, b, out, weight, eps);
  }
  void matmul(Tensor out, const Tensor& x, const Tensor& w, float alpha) override {
    if (!skips(out.dtype == DType::kF32 ? "logits" : "linear")) inner().matmul(out, x, w, alpha);
  }
  void quantize_fp8(Tensor out8, Tensor scales, const Tensor& x) override {
    if (!skips("quantize")) inner().quantize_fp8(out8, scales, x);
  }
  void layer_norm_fp8(Tensor out8, Tensor scales, const Tensor& x, const Tensor& weight, float eps,
                      Tensor scratch) override {
    if (!skips("norm")) inner().layer_norm_fp8(out8, scales, x, weight, eps, scratch);
  }
  void residual_layer_norm_fp8(Tensor h, const Tensor& a, const Tensor& b, Tensor out8, Tensor scales,
                               const Tensor& weight, float eps, Tensor scratch) override {
    if (!skips("norm")) inner().residual_layer_norm_fp8(h, a, b, out8, scales, weight, eps, scratch);
  }
  void silu_mul_fp8(Tensor out8, Tensor scales, const Tensor& gate_up, Tensor scratch) override {
    if (!skips("silu")) inner().silu_mul_fp8(out8, scales, gate_up, scratch);
  }
  void matmul_fp8(Tensor out, const Tensor& x8, const Tensor& x_scales, const Tensor& w8, const Tensor& w_scales,
                  float alpha) override {
    if (!skips("linear")) inner().matmul_fp8(out, x8, x_scales, w8, w_scales, alpha);
  }
  void rope(Tensor qkv, const Tensor& positions, const Tensor& inv_freq, int64_t num_rope_heads) override {
    if (!skips("rope_kv")) inner().rope(qkv, positions, inv_freq, num_rope_heads);
  }
  void store_kv(KvStorage& kv, int64_t layer, const Tensor& qkv, const Tensor& slot_mapping,
                const AttentionShape& shape) override {
    if (!skips("rope_kv")) inner().store_kv(kv, layer, qkv, slot_mapping, shape);
  }
  void rope_store_kv(KvStorage& kv, int64_t layer, Tensor qkv, const Tensor& positions, const Tensor& inv_freq,
                     const Tensor& slot_mapping, const AttentionShape& shape) override {
    if (!skips("rope_kv")) inner().rope_store_kv(kv, layer, qkv, positions, inv_freq, slot_mapping, shape);
  }
  void attention(Tensor out, const Tensor& qkv, const KvStorage& kv, int64_t layer, const AttentionBatch& batch,
                 const AttentionShape& shape, int64_t window) override {
    if (!skips("attention")) inner().attention(out, qkv, kv, layer, batch, shape, window);
  }
  void silu_mul(Tensor out, const Tensor& gate_up) override {
    if (!skips("silu")) inner().silu_mul(out, gate_up);
  }

 private:
  bool skips(const char* group) const { return skip_.count(group) > 0; }

  std::set<std::string> skip_;
  bool overlap_ = true;
};

}  // namespace tide::bench
