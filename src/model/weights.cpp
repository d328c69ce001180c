#include "model/weights.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "model/checkpoint.h"
#include "model/checkpoint_checks.h"

namespace tide {
namespace {

// Finds `name`, checks its dtype is one tide computes with and its shape is `expected`.
const TensorInfo& checked(const Checkpoint& ckpt, const std::string& name, std::vector<int64_t> expected) {
  const TensorInfo& t = ckpt.require(name);
  if (t.dtype == DType::kF8E4M3) {
    fail("{}: tensor '{}' is F8_E4M3: tide reads FP8 for the linear layers' weights only", t.file, name);
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

// A linear weight as the checkpoint holds it: a float tensor, or FP8 codes with their row scales.
struct LinearInfo {
  const TensorInfo* weight = nullptr;
  const TensorInfo* scale = nullptr;  // F8_E4M3 weights only
};

// Finds linear weight `name` of shape `expected` ([out, in]): a float tensor, or F8_E4M3 with `name`_scale
// ([out, 1] or [out], a float dtype).
LinearInfo checked_linear(const Checkpoint& ckpt, const std::string& name, std::vector<int64_t> expected) {
  const TensorInfo& t = ckpt.require(name);
  if (t.dtype != DType::kF8E4M3) return LinearInfo{&checked(ckpt, name, expected), nullptr};
  if (t.shape != expected) {
    fail("{}: tensor '{}' has shape {}, expected [{}]", t.file, name, t.shape_str(), fmt::join(expected, ", "));
  }
  const std::string scale_name = name + "_scale";
  const TensorInfo* scale = ckpt.find(scale_name);
  if (!scale) fail("{}: F8_E4M3 tensor '{}' has no '{}' (one scale per output row)", t.file, name, scale_name);
  const bool row_shape = scale->shape == std::vector<int64_t>{expected[0], 1} || scale->shape == std::vector<int64_t>{expected[0]};
  if (!row_shape) {
    fail("{}: tensor '{}' has shape {}, expected [{}, 1]: tide reads FP8 weights with one scale per output row",
         scale->file, scale_name, scale->shape_str(), expected[0]);
  }
  if (scale->dtype != DType::kBF16 && scale->dtype != DType::kF16 && scale->dtype != DType::kF32) {
    fail("{}: tensor '{}' has dtype {}, expected BF16, F16 or F32", scale->file, scale_name, dtype_name(scale->dtype));
  }
  return LinearInfo{&t, scale};
}

// The rows of `parts` ([rows_i, cols], one dtype) concatenated into a new [sum of rows, cols] backend tensor
// of `dtype`: each part copied from the checkpoint's mapping straight into its rows (no host copy of the whole).
Tensor upload_rows(Backend& backend, const std::vector<const TensorInfo*>& parts, DType dtype) {
  const TensorInfo& first = *parts.front();
  int64_t rows = 0;
  for (const TensorInfo* p : parts) {
    if (p->dtype != first.dtype) {
      fail("{}: tensor '{}' is {} but '{}' is {}: fused projections need one dtype", p->file, p->name,
           dtype_name(p->dtype), first.name, dtype_name(first.dtype));
    }
    rows += p->shape[0];
  }
  Tensor t = backend.alloc(dtype, Shape{rows, first.shape[1]});
  int64_t row = 0;
  for (const TensorInfo* p : parts) {
    backend.upload_into_as(t.slice_rows(row, row + p->shape[0]), p->data, p->dtype);
    row += p->shape[0];
  }
  return t;
}

// A float weight [N, K] in backend memory quantized rowwise to FP8 there (Backend::quantize_fp8: the codes and
// scales of fp8::quantize_row on each row's values). The caller drops `w` afterwards, so at most one float
// matrix is held beside the quantized ones.
Linear quantized(Backend& backend, const Tensor& w) {
  Linear out{backend.alloc(DType::kF8E4M3, w.shape), backend.alloc(DType::kF32, Shape{w.dim(0)})};
  backend.quantize_fp8(out.weight, out.scale, w);
  return out;
}

// Uploads the linear layers `parts` as one [sum of rows, cols] Linear (rows concatenated): as they are, FP8
// with their scales, or quantized to FP8 on the backend when `quantize`.
Linear upload_linear(Backend& backend, const std::vector<LinearInfo>& parts, bool quantize) {
  std::vector<const TensorInfo*> weights, scales;
  for (const LinearInfo& p : parts) {
    weights.push_back(p.weight);
    if (p.scale) scales.push_back(p.scale);
  }
  if (!scales.empty() && scales.size() != parts.size()) {
    fail("{}: tensor '{}' is F8_E4M3 but '{}' is not: fused projections need one dtype", parts.front().weight->file,
         scales.front()->name, weights.back()->name);
  }
  if (!scales.empty()) {  // an FP8 checkpoint: codes as they are, scales to f32
    std::vector<float> row_scales;
    for (const TensorInfo* s : scales) {
      const size_t n = static_cast<size_t>(s->numel());
      row_scales.resize(row_scales.size() + n);
      convert_to_f32(s->data, s->dtype, row_scales.data() + row_scales.size() - n, n);
    }
    for (float v : row_scales) {
      if (!(v > 0) || !std::isfinite(v)) fail("{}: FP8 weight scales must be positive and finite, got {}", scales.front()->file, v);
    }
    Tensor codes = upload_rows(backend, weights, DType::kF8E4M3);
    return Linear{codes, backend.upload(row_scales.data(), DType::kF32, Shape{codes.dim(0)})};
  }
  if (!quantize) return Linear{upload_rows(backend, weights, backend.weight_dtype()), Tensor{}};
  // Quantized from the checkpoint's own values: staged in the checkpoint's dtype where the backend stores it
  // (BF16 on a BF16 backend), else in F32, which holds every F16 / BF16 / F32 value exactly.
  const DType dtype = weights.front()->dtype;
  return quantized(backend, upload_rows(backend, weights, dtype == backend.weight_dtype() ? dtype : DType::kF32));
}

// An allocation of the weights that could not be made, with how far the load got (in checkpoint bytes; for
// dummy weights those of a bf16 checkpoint).
OutOfMemoryError weights_do_not_fit(const Backend& backend, int64_t done, int64_t total, const OutOfMemoryError& e) {
  return OutOfMemoryError(fmt::format("the model's weights do not fit in the {} backend's memory (out of memory after "
                                      "{} of {} checkpoint bytes): {}",
                                      backend.name(), done, total, e.what()));
}

}  // namespace

Cohere2Weights Cohere2Weights::load(const ModelConfig& c, const Checkpoint& ckpt, Backend& backend,
                                    const WeightLoadOptions& options) {
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  // Validate everything before uploading anything: a bad tensor is reported before minutes of copying.
  const std::vector<std::string> unread = check_tensor_inventory(c, ckpt);
  const TensorInfo& embed = checked(ckpt, "model.embed_tokens.weight", {c.vocab_size, h});
  const TensorInfo& norm = checked(ckpt, "model.norm.weight", {h});
  const TensorInfo* lm_head = c.tie_word_embeddings ? nullptr : &checked(ckpt, "lm_head.weight", {c.vocab_size, h});
  struct LayerInfos {
    const TensorInfo* norm;
    std::vector<LinearInfo> qkv, gate_up;
    LinearInfo o, down;
  };
  std::vector<LayerInfos> infos;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = fmt::format("model.layers.{}.", i);
    infos.push_back(LayerInfos{
        &checked(ckpt, p + "input_layernorm.weight", {h}),
        {checked_linear(ckpt, p + "self_attn.q_proj.weight", {c.q_size(), h}),
         checked_linear(ckpt, p + "self_attn.k_proj.weight", {c.kv_size(), h}),
         checked_linear(ckpt, p + "self_attn.v_proj.weight", {c.kv_size(), h})},
        {checked_linear(ckpt, p + "mlp.gate_proj.weight", {inter, h}),
         checked_linear(ckpt, p + "mlp.up_proj.weight", {inter, h})},
        checked_linear(ckpt, p + "self_attn.o_proj.weight", {h, c.q_size()}),
        checked_linear(ckpt, p + "mlp.down_proj.weight", {h, inter}),
    });
  }

  // Values: the norms entirely and a sample of the linear weights now; the embedding (and lm_head) entirely,
  // on another thread while the layers upload (checkpoint_checks.h).
  std::vector<const TensorInfo*> sampled{&norm};
  for (const LayerInfos& li : infos) {
    sampled.push_back(li.norm);
    for (const std::vector<LinearInfo>* parts : {&li.qkv, &li.gate_up}) {
      for (const LinearInfo& p : *parts) sampled.push_back(p.weight);
    }
    sampled.push_back(li.o.weight);
    sampled.push_back(li.down.weight);
  }
  check_finite_sampled(sampled);
  if (!unread.empty()) {
    log_info("warning: {}: {} tensor(s) of the checkpoint are not read by tide{}: '{}'{}", ckpt.dir().string(),
             unread.size(), c.tie_word_embeddings ? " (tie_word_embeddings is true: lm_head is the embedding)" : "",
             fmt::join(unread.begin(), unread.begin() + std::min<ptrdiff_t>(std::ssize(unread), 5), "', '"),
             unread.size() > 5 ? ", ..." : "");
  }

  bool stored_fp8 = false;
  for (const LayerInfos& li : infos) {
    for (const LinearInfo* l : {&li.qkv[0], &li.o, &li.gate_up[0], &li.down}) stored_fp8 = stored_fp8 || l->scale != nullptr;
  }
  // A folder whose config.json promises FP8 weights but whose checkpoint has none is mismatched (a config copied
  // over another checkpoint): refused rather than run in the checkpoint's dtype under an FP8 label.
  if (c.quantization == Quantization::kFp8 && !stored_fp8) {
    fail("config.json's quantization_config describes compressed-tensors FP8, but no linear weight in the "
         "checkpoint is F8_E4M3");
  }
  const bool fp8 = options.quantize_fp8 || stored_fp8;
  if (fp8 && !backend.supports_fp8()) fail("the {} backend does not run FP8 models yet", backend.name());

  // Progress in checkpoint bytes: the embedding (and lm_head), then each layer.
  auto linear_bytes = [](const std::vector<LinearInfo>& parts) {
    int64_t n = 0;
    for (const LinearInfo& p : parts) n += static_cast<int64_t>(p.weight->nbytes + (p.scale ? p.scale->nbytes : 0));
    return n;
  };
  std::vector<int64_t> layer_bytes;
  int64_t total = static_cast<int64_t>(embed.nbytes + norm.nbytes + (lm_head ? lm_head->nbytes : 0)), done = 0;
  for (const LayerInfos& li : infos) {
    layer_bytes.push_back(static_cast<int64_t>(li.norm->nbytes) + linear_bytes(li.qkv) + linear_bytes({li.o}) +
                          linear_bytes(li.gate_up) + linear_bytes({li.down}));
    total += layer_bytes.back();
  }
  auto advance = [&](int64_t bytes) {
    done += bytes;
    if (options.progress) options.progress(done, total);
  };

  BackgroundFiniteCheck embedding_check(lm_head ? std::vector{&embed, lm_head} : std::vector{&embed});
  Cohere2Weights w;
  try {
    w.embed = upload_one(backend, embed);
    w.lm_head = lm_head ? upload_one(backend, *lm_head) : w.embed;
    w.final_norm = upload_one(backend, norm);
    advance(static_cast<int64_t>(embed.nbytes + norm.nbytes + (lm_head ? lm_head->nbytes : 0)));
    const bool q = options.quantize_fp8;
    for (size_t i = 0; i < infos.size(); ++i) {
      const LayerInfos& li = infos[i];
      w.layers.push_back(LayerWeights{upload_one(backend, *li.norm), upload_linear(backend, li.qkv, q),
                                      upload_linear(backend, {li.o}, q), upload_linear(backend, li.gate_up, q),
                                      upload_linear(backend, {li.down}, q)});
      advance(layer_bytes[i]);
    }
  } catch (const OutOfMemoryError& e) {
    throw weights_do_not_fit(backend, done, total, e);
  }
  embedding_check.finish();
  return w;
}

Cohere2Weights Cohere2Weights::dummy(const ModelConfig& c, Backend& backend, const WeightLoadOptions& options) {
  const bool fp8 = options.quantize_fp8 || c.quantization == Quantization::kFp8;
  if (fp8 && !backend.supports_fp8()) fail("the {} backend does not run FP8 models yet", backend.name());
  const int64_t h = c.hidden_size;
  uint64_t seed = 0x64756d6d79;  // "dummy"; one more per tensor
  auto random = [&](Shape shape, float center, float amplitude) {
    Tensor t = backend.alloc(backend.weight_dtype(), shape);
    backend.fill_uniform(t, center, amplitude, seed++);
    return t;
  };
  auto linear = [&](int64_t rows, int64_t cols) {
    Tensor w = random(Shape{rows, cols}, 0.0f, kDummyWeightScale);
    return fp8 ? quantized(backend, w) : Linear{w, Tensor{}};
  };

  // Progress in the bytes of a bf16 checkpoint: the embedding (and lm_head), then each layer.
  const int64_t embed_bytes = 2 * (c.vocab_size * h * (c.tie_word_embeddings ? 1 : 2) + h);
  const int64_t layer_bytes =
      2 * (h + (c.qkv_size() + 2 * c.intermediate_size) * h + h * c.q_size() + h * c.intermediate_size);
  const int64_t total = embed_bytes + c.num_layers * layer_bytes;
  int64_t done = 0;
  auto advance = [&](int64_t bytes) {
    done += bytes;
    if (options.progress) options.progress(done, total);
  };

  Cohere2Weights w;
  try {
    w.embed = random(Shape{c.vocab_size, h}, 0.0f, kDummyWeightScale);
    w.lm_head = c.tie_word_embeddings ? w.embed : random(Shape{c.vocab_size, h}, 0.0f, kDummyWeightScale);
    w.final_norm = random(Shape{h}, 1.0f, 0.0f);
    advance(embed_bytes);
    for (int64_t i = 0; i < c.num_layers; ++i) {
      LayerWeights l;
      l.input_norm = random(Shape{h}, 1.0f, 0.0f);
      l.qkv = linear(c.qkv_size(), h);
      l.o = linear(h, c.q_size());
      l.gate_up = linear(2 * c.intermediate_size, h);
      l.down = linear(h, c.intermediate_size);
      w.layers.push_back(std::move(l));
      advance(layer_bytes);
    }
  } catch (const OutOfMemoryError& e) {
    throw weights_do_not_fit(backend, done, total, e);
  }
  return w;
}

bool Cohere2Weights::has_fp8() const {
  for (const LayerWeights& l : layers) {
    if (l.qkv.fp8() || l.o.fp8() || l.gate_up.fp8() || l.down.fp8()) return true;
  }
  return false;
}

}  // namespace tide
