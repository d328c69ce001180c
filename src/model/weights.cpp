#include "model/weights.h"

#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "model/checkpoint.h"

namespace tide {
namespace {

// Finds `name`, checks its dtype is one tide computes with and its shape is `expected`.
const TensorInfo& checked(const Checkpoint& ckpt, const std::string& name, std::vector<int64_t> expected) {
  const TensorInfo& t = ckpt.require(name);
  if (t.dtype == DType::kF8E4M3) {
    fail("{}: tensor '{}' is F8_E4M3: FP8 checkpoints are not supported yet", t.file, name);
  }
  if (t.dtype != DType::kBF16 && t.dtype != DType::kF16 && t.dtype != DType::kF32) {
    fail("{}: tensor '{}' has dtype {}, expected BF16, F16 or F32", t.file, name, dtype_name(t.dtype));
  }
  if (t.shape != expected) {
    fail("{}: tensor '{}' has shape {}, expected [{}]", t.file, name, t.shape_str(), fmt::join(expected, ", "));
  }
  return t;
}

Tensor upload_one(Backend& backend, const TensorInfo& t) {
  Shape shape;
  for (int64_t d : t.shape) shape.dims[static_cast<size_t>(shape.ndim++)] = d;
  return backend.upload_as(t.data, t.dtype, shape, backend.weight_dtype());
}

// Concatenates the rows of same-dtype [rows_i, cols] tensors and uploads them as one [sum rows_i, cols].
Tensor upload_fused(Backend& backend, const std::vector<const TensorInfo*>& parts) {
  const TensorInfo& first = *parts.front();
  int64_t rows = 0;
  size_t bytes = 0;
  for (const TensorInfo* p : parts) {
    if (p->dtype != first.dtype) {
      fail("{}: tensor '{}' is {} but '{}' is {}: fused projections need one dtype", p->file, p->name,
           dtype_name(p->dtype), first.name, dtype_name(first.dtype));
    }
    rows += p->shape[0];
    bytes += p->nbytes;
  }
  std::vector<std::byte> host(bytes);
  size_t offset = 0;
  for (const TensorInfo* p : parts) {
    std::memcpy(host.data() + offset, p->data, p->nbytes);
    offset += p->nbytes;
  }
  return backend.upload_as(host.data(), first.dtype, Shape{rows, first.shape[1]}, backend.weight_dtype());
}

}  // namespace

Cohere2Weights Cohere2Weights::load(const ModelConfig& c, const Checkpoint& ckpt, Backend& backend) {
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  // Validate everything before uploading anything: a bad tensor is reported before minutes of copying.
  const TensorInfo& embed = checked(ckpt, "model.embed_tokens.weight", {c.vocab_size, h});
  const TensorInfo& norm = checked(ckpt, "model.norm.weight", {h});
  const TensorInfo* lm_head = c.tie_word_embeddings ? nullptr : &checked(ckpt, "lm_head.weight", {c.vocab_size, h});
  struct LayerInfos {
    const TensorInfo* norm;
    std::vector<const TensorInfo*> qkv, gate_up;
    const TensorInfo *o, *down;
  };
  std::vector<LayerInfos> infos;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    infos.push_back(LayerInfos{
        &checked(ckpt, p + "input_layernorm.weight", {h}),
        {&checked(ckpt, p + "self_attn.q_proj.weight", {c.q_size(), h}),
         &checked(ckpt, p + "self_attn.k_proj.weight", {c.kv_size(), h}),
         &checked(ckpt, p + "self_attn.v_proj.weight", {c.kv_size(), h})},
        {&checked(ckpt, p + "mlp.gate_proj.weight", {inter, h}), &checked(ckpt, p + "mlp.up_proj.weight", {inter, h})},
        &checked(ckpt, p + "self_attn.o_proj.weight", {h, c.q_size()}),
        &checked(ckpt, p + "mlp.down_proj.weight", {h, inter}),
    });
  }

  Cohere2Weights w;
  w.embed = upload_one(backend, embed);
  w.lm_head = lm_head ? upload_one(backend, *lm_head) : w.embed;
  w.final_norm = upload_one(backend, norm);
  for (const LayerInfos& li : infos) {
    w.layers.push_back(LayerWeights{upload_one(backend, *li.norm), upload_fused(backend, li.qkv),
                                    upload_one(backend, *li.o), upload_fused(backend, li.gate_up),
                                    upload_one(backend, *li.down)});
  }
  return w;
}

}  // namespace tide
