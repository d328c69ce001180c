#include "model/checkpoint_checks.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"
#include "core/parallel.h"

namespace tide {
namespace {

constexpr std::string_view kLayerPrefix = "model.layers.";

// The tensors of one layer that tide reads; the linear ones may carry a "_scale" beside them (FP8).
constexpr std::string_view kLayerNorm = "input_layernorm.weight";
constexpr std::string_view kLayerLinears[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                              "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                              "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                                              "mlp.down_proj.weight"};
// Buffers some checkpoints store per layer that tide recomputes from the config.
constexpr std::string_view kLayerBuffers[] = {"self_attn.rotary_emb.inv_freq", "rotary_emb.inv_freq"};

// "model.layers.N.rest" -> N and rest; false for other names (and for N with a sign or leading zeros).
bool split_layer_name(std::string_view name, int64_t* layer, std::string_view* rest) {
  if (!name.starts_with(kLayerPrefix)) return false;
  name.remove_prefix(kLayerPrefix.size());
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0 || (dot > 1 && name[0] == '0')) return false;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + dot, *layer);
  if (ec != std::errc() || end != name.data() + dot) return false;
  *rest = name.substr(dot + 1);
  return true;
}

bool is_layer_tensor(std::string_view rest, const Checkpoint& ckpt, const std::string& full_name) {
  if (rest == kLayerNorm) return true;
  for (std::string_view linear : kLayerLinears) {
    if (rest == linear) return true;
    // An FP8 weight's row scales (compressed-tensors' weight_scale) beside an F8_E4M3 weight.
    if (rest.size() == linear.size() + 6 && rest.starts_with(linear) && rest.ends_with("_scale")) {
      const TensorInfo* weight = ckpt.find(full_name.substr(0, full_name.size() - 6));
      return weight != nullptr && weight->dtype == DType::kF8E4M3;
    }
  }
  return false;
}

std::string layer_range(const std::set<int64_t>& layers) {
  if (layers.empty()) return "no layers";
  const int64_t first = *layers.begin(), last = *layers.rbegin();
  if (static_cast<int64_t>(layers.size()) == last - first + 1) return fmt::format("layers {}-{}", first, last);
  return fmt::format("{} layers between {} and {}", layers.size(), first, last);
}

// --- finite scans ---

template <typename U>
int64_t first_masked(const std::byte* data, size_t count, U mask) {
  // A branch-free test over blocks (vectorized by the compiler); the element is searched only in a bad block.
  constexpr size_t kBlock = 4096;
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t end = std::min(count, begin + kBlock);
    unsigned bad = 0;  // an integer, not a bool: GCC vectorizes this OR but not a bool's
    for (size_t i = begin; i < end; ++i) {
      U v;
      std::memcpy(&v, data + i * sizeof(U), sizeof(U));  // tensors may be unaligned (safetensors.h)
      bad |= static_cast<unsigned>((v & mask) == mask);
    }
    if (!bad) continue;
    for (size_t i = begin; i < end; ++i) {
      U v;
      std::memcpy(&v, data + i * sizeof(U), sizeof(U));
      if ((v & mask) == mask) return static_cast<int64_t>(i);
    }
  }
  return -1;
}

// Index of the first NaN or infinity among `count` elements of `dtype` at `data` (all exponent bits set:
// infinity or NaN in F32, BF16, F16; E4M3 has no infinity and one NaN code per sign, S.1111.111), or -1.
// Integer dtypes hold no such values.
int64_t first_non_finite(const std::byte* data, DType dtype, size_t count) {
  switch (dtype) {
    case DType::kF32: return first_masked<uint32_t>(data, count, 0x7F800000u);
    case DType::kBF16: return first_masked<uint16_t>(data, count, 0x7F80u);
    case DType::kF16: return first_masked<uint16_t>(data, count, 0x7C00u);
    case DType::kF8E4M3: return first_masked<uint8_t>(data, count, 0x7Fu);
    default: return -1;
  }
}

// A range of elements of one tensor to scan.
struct ScanRun {
  const TensorInfo* tensor;
  size_t begin = 0, count = 0;  // elements
};

// Full scans are cut into runs of this many bytes, so that one large tensor spreads over every thread.
constexpr size_t kFullRunBytes = size_t{8} << 20;

void add_full(std::vector<ScanRun>& runs, const TensorInfo* t) {
  const size_t elem = dtype_size(t->dtype), n = t->nbytes / elem, per = kFullRunBytes / elem;
  for (size_t begin = 0; begin < n; begin += per) runs.push_back(ScanRun{t, begin, std::min(per, n - begin)});
}

void add_sampled(std::vector<ScanRun>& runs, const TensorInfo* t) {
  if (t->nbytes <= kFullScanBytes) return add_full(runs, t);
  const size_t elem = dtype_size(t->dtype), n = t->nbytes / elem, run = kSampleRunBytes / elem;
  const size_t count = std::max(kMinSampleRuns, t->nbytes / (kSampleRunBytes * kSampleStride));
  // Run i starts at i / (count - 1) of the way to the last run's start: the first and last elements included.
  for (size_t i = 0; i < count; ++i) {
    const auto begin = static_cast<size_t>(static_cast<unsigned __int128>(n - run) * i / (count - 1));
    runs.push_back(ScanRun{t, begin, run});
  }
}

[[noreturn]] void fail_non_finite(const TensorInfo& t, size_t index) {
  float value = NAN;  // E4M3's only non-finite code
  if (t.dtype != DType::kF8E4M3) convert_to_f32(t.data + index * dtype_size(t.dtype), t.dtype, &value, 1);
  std::string where = fmt::format("element {}", index);
  if (t.shape.size() == 2 && t.shape[1] > 0) {
    const auto cols = static_cast<size_t>(t.shape[1]);
    where += fmt::format(" (row {}, column {})", index / cols, index % cols);
  }
  fail("{}: tensor '{}' holds {} at {}: the checkpoint is corrupt (weights must be finite)", t.file, t.name,
       std::isnan(value) ? "NaN" : value > 0 ? "+infinity" : "-infinity", where);
}

void scan(const std::vector<ScanRun>& runs, int max_threads) {
  // parallel_for rethrows the error of the earliest slice, so the message names the same element every time.
  parallel_for(
      static_cast<int64_t>(runs.size()), 1,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const ScanRun& run = runs[static_cast<size_t>(r)];
          const size_t elem = dtype_size(run.tensor->dtype);
          const int64_t bad = first_non_finite(run.tensor->data + run.begin * elem, run.tensor->dtype, run.count);
          if (bad >= 0) fail_non_finite(*run.tensor, run.begin + static_cast<size_t>(bad));
        }
      },
      max_threads);
}

// The background scan leaves most host threads to the uploads it overlaps.
constexpr int kBackgroundThreads = 4;

}  // namespace

std::vector<std::string> check_tensor_inventory(const ModelConfig& c, const Checkpoint& ckpt) {
  const std::string config_file = (ckpt.dir() / "config.json").string();
  std::set<int64_t> layers;              // layer indices the checkpoint holds tensors of
  std::map<int64_t, std::string> beyond;  // a tensor of each layer >= num_hidden_layers
  std::vector<std::string> unread;
  for (const std::string& name : ckpt.names()) {
    int64_t layer = 0;
    std::string_view rest;
    if (split_layer_name(name, &layer, &rest)) {
      layers.insert(layer);
      if (layer >= c.num_layers) {
        beyond.emplace(layer, name);
        continue;
      }
      const bool buffer = std::find(std::begin(kLayerBuffers), std::end(kLayerBuffers), rest) != std::end(kLayerBuffers);
      if (!buffer && !is_layer_tensor(rest, ckpt, name)) {
        fail("{}: tensor '{}' is not one tide computes with (a Cohere2 layer holds input_layernorm and the q, k, v, "
             "o, gate, up and down projections): the model needs a feature tide does not support, or config.json "
             "does not describe this checkpoint",
             ckpt.require(name).file, name);
      }
      continue;
    }
    if (name == "model.embed_tokens.weight" || name == "model.norm.weight") continue;
    if (name == "lm_head.weight" && !c.tie_word_embeddings) continue;
    unread.push_back(name);
  }
  if (!beyond.empty()) {
    fail("{}: field 'num_hidden_layers' is {}, but the checkpoint holds {} (tensor '{}' in {}): config.json does "
         "not describe this checkpoint",
         config_file, c.num_layers, layer_range(layers), beyond.begin()->second,
         ckpt.require(beyond.begin()->second).file);
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (!layers.contains(i)) {
      fail("{}: field 'num_hidden_layers' is {}, but the checkpoint in {} holds {} (no tensor of layer {}): "
           "config.json does not describe this checkpoint",
           config_file, c.num_layers, ckpt.dir().string(), layer_range(layers), i);
    }
  }
  return unread;
}

void check_finite(std::span<const TensorInfo* const> tensors) {
  std::vector<ScanRun> runs;
  for (const TensorInfo* t : tensors) add_full(runs, t);
  scan(runs, 0);
}

void check_finite_sampled(std::span<const TensorInfo* const> tensors) {
  std::vector<ScanRun> runs;
  for (const TensorInfo* t : tensors) add_sampled(runs, t);
  scan(runs, 0);
}

BackgroundFiniteCheck::BackgroundFiniteCheck(std::vector<const TensorInfo*> tensors) : tensors_(std::move(tensors)) {
  done_ = std::async(std::launch::async, [this] {
    std::vector<ScanRun> runs;
    for (const TensorInfo* t : tensors_) add_full(runs, t);
    scan(runs, kBackgroundThreads);
  });
}

BackgroundFiniteCheck::~BackgroundFiniteCheck() {
  if (done_.valid()) done_.wait();
}

void BackgroundFiniteCheck::finish() {
  if (done_.valid()) done_.get();
}

}  // namespace tide
