// Checks of a checkpoint against its config.json beyond each tensor's dtype and shape (weights.cpp): the layers
// it holds are the layers the config declares, every tensor is explained, and its values are finite.
// A folder whose config and checkpoint disagree would otherwise run a truncated model or generate garbage
// (NaN logits pick token 0 forever); each refusal names the file and the field or tensor at fault.
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <span>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"

namespace tide {

// Compares the checkpoint's tensor names with the ones `config` makes tide read. Throws tide::Error naming
// config.json's num_hidden_layers when the checkpoint holds layers beyond it or lacks some of its layers, and
// naming the tensor when a layer holds one that tide does not compute with (a feature it would silently
// drop). Returns the other tensors tide does not read (lm_head.weight beside tied embeddings, stray
// top-level tensors), for the caller to warn about; layers' rotary_emb.inv_freq buffers are explained (RoPE
// is computed from the config) and not returned.
std::vector<std::string> check_tensor_inventory(const ModelConfig& config, const Checkpoint& checkpoint);

// Tensors of this many bytes or fewer are scanned entirely by check_finite_sampled; larger ones by a sample.
inline constexpr size_t kFullScanBytes = size_t{1} << 20;
// A sampled tensor is read in runs of one page, about one byte in kSampleStride, at least kMinSampleRuns runs
// spread evenly from its first to its last byte: about 200 MB of a 111B-parameter bf16 checkpoint, read in
// tens of milliseconds by the host's threads while its load takes many seconds.
inline constexpr size_t kSampleRunBytes = size_t{4} << 10;
inline constexpr size_t kSampleStride = 1024;
inline constexpr size_t kMinSampleRuns = 16;

// Scans every value of `tensors` (float or FP8 dtypes) for NaN and infinity, over host threads. Throws
// tide::Error naming the file, the tensor and the first bad element found.
void check_finite(std::span<const TensorInfo* const> tensors);
// The same over the tensors up to kFullScanBytes and a strided sample of larger ones (about 1/kSampleStride
// of their bytes, and at least kMinSampleRuns pages): a corrupt matrix is rarely corrupt in one value only, and a full scan of a 100B-parameter
// checkpoint would cost seconds of its load.
void check_finite_sampled(std::span<const TensorInfo* const> tensors);

// check_finite of `tensors` on a background thread, so that the scan of large tensors (the embedding)
// overlaps the upload of others; finish() waits for it and throws its error. The destructor waits too (an
// upload that failed first reports its own error).
class BackgroundFiniteCheck {
 public:
  explicit BackgroundFiniteCheck(std::vector<const TensorInfo*> tensors);
  ~BackgroundFiniteCheck();
  BackgroundFiniteCheck(const BackgroundFiniteCheck&) = delete;
  BackgroundFiniteCheck& operator=(const BackgroundFiniteCheck&) = delete;
  void finish();

 private:
  std::vector<const TensorInfo*> tensors_;
  std::future<void> done_;
};

}  // namespace tide
