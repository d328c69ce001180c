// ForwardingBackend: a Backend that passes every call to another one. Wrappers derive from it and override
// the calls they watch or change: the benchmark's AblationBackend (skips op groups to time them), the tests'
// checks of what the forward pass asks of a backend.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "backend/backend.h"

namespace tide {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner) : inner_(inner) {}

  std::string name() const override { return inner_.name(); }
  Tensor alloc(DType dtype, Shape shape) override { return inner_.alloc(dtype, std::move(shape)); }
  Tensor alloc_uninitialized(DType dtype, Shape shape) override {
    return inner_.alloc_uninitialized(dtype, std::move(shape));
  }
  Tensor alloc_host(DType dtype, Shape shape) override { return inner_.alloc_host(dtype, std::move(shape)); }
  Tensor upload_as(const void* host, DType host_dtype, Shape shape, DType dtype) override {
    return inner_.upload_as(host, host_dtype, std::move(shape), dtype);
  }
  void upload_into(Tensor t, const void* host) override { inner_.upload_into(std::move(t), host); }
  void upload_into_as(Tensor t, const void* host, DType host_dtype) override {
    inner_.upload_into_as(std::move(t), host, host_dtype);
  }
  void download(const Tensor& t, void* host) override { inner_.download(t, host); }
  DType weight_dtype() const override { return inner_.weight_dtype(); }
  DType activation_dtype() const override { return inner_.activation_dtype(); }
  std::optional<MemoryInfo> memory_info() const override { return inner_.memory_info(); }
  bool supports_fp8() const override { return inner_.supports_fp8(); }
  bool supports_fp8_kv(int64_t head_dim) const override { return inner_.supports_fp8_kv(head_dim); }
  void bind_thread() override { inner_.bind_thread(); }
  std::unique_ptr<Graph> capture(const std::function<void()>& body) override { return inner_.capture(body); }
  void side_begin() override { inner_.side_begin(); }
  void side_end() override { inner_.side_end(); }
  void side_join() override { inner_.side_join(); }

  void embedding(Tensor out, const Tensor& table, const Tensor& ids) override { inner_.embedding(out, table, ids); }
  void gather_rows(Tensor out, const Tensor& x, const Tensor& rows) override { inner_.gather_rows(out, x, rows); }
  void layer_norm(Tensor out, const Tensor& x, const Tensor& weight, float eps) override {
    inner_.layer_norm(out, x, weight, eps);
  }
  void residual_layer_norm(Tensor h, const Tensor& a, const Tensor& b, Tensor out, const Tensor& weight,
                           float eps) override {
    inner_.residual_layer_norm(h, a, b, out, weight, eps);
  }
  void matmul(Tensor out, const Tensor& x, const Tensor& w, float alpha) override { inner_.matmul(out, x, w, alpha); }
  void quantize_fp8(Tensor out8, Tensor scales, const Tensor& x) override { inner_.quantize_fp8(out8, scales, x); }
  void fill_uniform(Tensor t, float center, float amplitude, uint64_t seed) override {
    inner_.fill_uniform(std::move(t), center, amplitude, seed);
  }
  void layer_norm_fp8(Tensor out8, Tensor scales, const Tensor& x, const Tensor& weight, float eps,
                      Tensor scratch) override {
    inner_.layer_norm_fp8(out8, scales, x, weight, eps, scratch);
  }
  void residual_layer_norm_fp8(Tensor h, const Tensor& a, const Tensor& b, Tensor out8, Tensor scales,
                               const Tensor& weight, float eps, Tensor scratch) override {
    inner_.residual_layer_norm_fp8(h, a, b, out8, scales, weight, eps, scratch);
  }
  void silu_mul_fp8(Tensor out8, Tensor scales, const Tensor& gate_up, Tensor scratch) override {
    inner_.silu_mul_fp8(out8, scales, gate_up, scratch);
  }
  void matmul_fp8(Tensor out, const Tensor& x8, const Tensor& x_scales, const Tensor& w8, const Tensor& w_scales,
                  float alpha) override {
    inner_.matmul_fp8(out, x8, x_scales, w8, w_scales, alpha);
  }
  void rope(Tensor qkv, const Tensor& positions, const Tensor& inv_freq, int64_t num_rope_heads) override {
    inner_.rope(qkv, positions, inv_freq, num_rope_heads);
  }
  void store_kv(KvStorage& kv, int64_t layer, const Tensor& qkv, const Tensor& slot_mapping,
                const AttentionShape& shape) override {
    inner_.store_kv(kv, layer, qkv, slot_mapping, shape);
  }
  void rope_store_kv(KvStorage& kv, int64_t layer, Tensor qkv, const Tensor& positions, const Tensor& inv_freq,
                     const Tensor& slot_mapping, const AttentionShape& shape) override {
    inner_.rope_store_kv(kv, layer, qkv, positions, inv_freq, slot_mapping, shape);
  }
  void attention(Tensor out, const Tensor& qkv, const KvStorage& kv, int64_t layer, const AttentionBatch& batch,
                 const AttentionShape& shape, int64_t window) override {
    inner_.attention(out, qkv, kv, layer, batch, shape, window);
  }
  void silu_mul(Tensor out, const Tensor& gate_up) override { inner_.silu_mul(out, gate_up); }
  void add(Tensor out, const Tensor& a, const Tensor& b) override { inner_.add(out, a, b); }
  void copy(Tensor out, const Tensor& x) override { inner_.copy(out, x); }
  void sample(Tensor out_ids, Tensor logits, const SamplingBatch& batch) override {
    inner_.sample(out_ids, logits, batch);
  }
  bool supports_draft_sampling() const override { return inner_.supports_draft_sampling(); }
  void sample_with_drafts(Tensor out_ids, Tensor logits, const SamplingBatch& batch, const DraftSampling& drafts) override {
    inner_.sample_with_drafts(out_ids, logits, batch, drafts);
  }
  void logprobs(Tensor out_values, Tensor out_ids, const Tensor& logits, const Tensor& chosen_ids, int n) override {
    inner_.logprobs(out_values, out_ids, logits, chosen_ids, n);
  }
  void copy_blocks(KvStorage& device, Tensor& host, std::span<const BlockCopy> copies) override {
    inner_.copy_blocks(device, host, copies);
  }

 protected:
  Backend& inner() { return inner_; }
  const Backend& inner() const { return inner_; }

 private:
  Backend& inner_;
};

}  // namespace tide
