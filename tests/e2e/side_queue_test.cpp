// The forward pass's use of the backend's second queue (Backend::side_begin), checked on the CPU, which CI
// runs: sections balanced and never nested, each joined before the step's results are read or sampled, one
// per layer, no allocation inside one (the CUDA backend refuses it: a buffer freed on one stream and taken
// on the other would be shared by two running kernels) and nothing of the attention chain inside one; and
// the same logits and tokens as the plain backend.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/forwarding_backend.h"
#include "runtime/engine.h"

namespace tide {
namespace {

using test::fixture;

class QueueCheckingBackend final : public ForwardingBackend {
 public:
  explicit QueueCheckingBackend(std::unique_ptr<Backend> inner)
      : ForwardingBackend(*inner), owned_(std::move(inner)) {}

  std::vector<std::string> problems;  // each broken rule, once per occurrence
  int64_t sections = 0;               // side_begin calls
  int64_t side_matmuls = 0;           // matmuls issued inside a section

  void side_begin() override {
    check(!on_side_, "side_begin inside a section");
    on_side_ = unjoined_ = true;
    ++sections;
    ForwardingBackend::side_begin();
  }
  void side_end() override {
    check(on_side_, "side_end outside a section");
    on_side_ = false;
    ForwardingBackend::side_end();
  }
  void side_join() override {
    check(!on_side_, "side_join inside a section");
    unjoined_ = false;
    ForwardingBackend::side_join();
  }
  Tensor alloc(DType dtype, Shape shape) override {
    check(!on_side_, "alloc inside a section");
    return ForwardingBackend::alloc(dtype, std::move(shape));
  }
  void download(const Tensor& t, void* host) override {
    check(!on_side_ && !unjoined_, "download before the side queue joined");
    ForwardingBackend::download(t, host);
  }
  void sample(Tensor out_ids, Tensor logits, const SamplingBatch& batch) override {
    check(!on_side_ && !unjoined_, "sample before the side queue joined");
    ForwardingBackend::sample(out_ids, logits, batch);
  }
  void attention(Tensor out, const Tensor& qkv, const KvStorage& kv, int64_t layer, const AttentionBatch& batch,
                 const AttentionShape& shape, int64_t window) override {
    check(!on_side_, "attention inside a section");
    ForwardingBackend::attention(out, qkv, kv, layer, batch, shape, window);
  }
  void rope_store_kv(KvStorage& kv, int64_t layer, Tensor qkv, const Tensor& positions, const Tensor& inv_freq,
                     const Tensor& slot_mapping, const AttentionShape& shape) override {
    check(!on_side_, "rope_store_kv inside a section");
    ForwardingBackend::rope_store_kv(kv, layer, qkv, positions, inv_freq, slot_mapping, shape);
  }
  void store_kv(KvStorage& kv, int64_t layer, const Tensor& qkv, const Tensor& slot_mapping,
                const AttentionShape& shape) override {
    check(!on_side_, "store_kv inside a section");
    ForwardingBackend::store_kv(kv, layer, qkv, slot_mapping, shape);
  }
  void matmul(Tensor out, const Tensor& x, const Tensor& w, float alpha) override {
    side_matmuls += on_side_ ? 1 : 0;
    ForwardingBackend::matmul(out, x, w, alpha);
  }
  void matmul_fp8(Tensor out, const Tensor& x8, const Tensor& x_scales, const Tensor& w8, const Tensor& w_scales,
                  float alpha) override {
    side_matmuls += on_side_ ? 1 : 0;
    ForwardingBackend::matmul_fp8(out, x8, x_scales, w8, w_scales, alpha);
  }

 private:
  void check(bool ok, const char* rule) {
    if (!ok) problems.emplace_back(rule);
  }

  std::unique_ptr<Backend> owned_;
  bool on_side_ = false;   // between side_begin and side_end
  bool unjoined_ = false;  // a section began and no side_join followed yet
};

class SideQueue : public ::testing::TestWithParam<std::string> {};

TEST_P(SideQueue, ForwardPassKeepsTheRulesAndChangesNoResult) {
  const std::vector<int32_t> prompt = {5, 100, 200, 300, 400, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29};
  GenerateOptions greedy;
  greedy.max_tokens = 8;
  greedy.ignore_eos = true;
  for (const char* quantization : {"", "fp8"}) {
    EngineOptions options;
    options.quantization = *quantization != 0 ? Quantization::kFp8 : Quantization::kNone;
    options.kv_cache_memory = int64_t{16} << 20;
    auto owned = std::make_unique<QueueCheckingBackend>(std::make_unique<CpuBackend>());
    QueueCheckingBackend* checked = owned.get();
    Engine engine(fixture(GetParam()), std::move(owned), options);
    Engine plain(fixture(GetParam()), std::make_unique<CpuBackend>(), options);

    EXPECT_EQ(engine.prompt_logits(prompt, true), plain.prompt_logits(prompt, true)) << quantization;
    EXPECT_EQ(engine.generate(prompt, greedy).ids, plain.generate(prompt, greedy).ids) << quantization;
    EXPECT_TRUE(checked->problems.empty()) << checked->problems.front();
    const auto layers = static_cast<int64_t>(engine.config().layers.size());
    EXPECT_GT(checked->sections, 0);
    EXPECT_EQ(checked->sections % layers, 0) << "one section per layer and step";
    EXPECT_EQ(checked->side_matmuls, 2 * checked->sections) << "gate_up and down in each section";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SideQueue, ::testing::Values("cohere2-tiny", "cohere2-tiny-hd128"));

}  // namespace
}  // namespace tide
