// Checkpoint: the tensors of a Hugging Face model folder, from a single model.safetensors or from shards
// listed by model.safetensors.index.json, each shard mapped once (see model/safetensors.h). Lookup by name.
// Non-goals: .bin / .pt checkpoints, downloading, the index's "metadata" (total_size is informational only).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "model/safetensors.h"

namespace tide {

inline constexpr std::string_view kSingleFileName = "model.safetensors";
inline constexpr std::string_view kIndexFileName = "model.safetensors.index.json";

class Checkpoint {
 public:
  // Opens `dir`/model.safetensors when it exists (as transformers does, it wins over an index), otherwise the
  // shards named by `dir`/model.safetensors.index.json. Throws tide::Error when:
  //  - neither file exists (the message names the folder and both file names);
  //  - the index is not JSON, or "weight_map" is not an object of tensor name -> string;
  //  - a shard name is not a plain file name inside `dir` ("../x", "/abs", "sub/x", ".", "");
  //  - a shard cannot be opened or is malformed (see SafetensorsFile::open);
  //  - a weight_map tensor is missing from its named shard (names tensor and file);
  //  - a tensor is present in two shards (names tensor and both files).
  // Tensors found in an opened shard but absent from weight_map are still served by find().
  static Checkpoint open(const std::filesystem::path& dir);

  Checkpoint(Checkpoint&&) noexcept = default;
  Checkpoint& operator=(Checkpoint&&) noexcept = default;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  // nullptr when absent. The TensorInfo lives as long as this Checkpoint (moving it keeps pointers valid).
  const TensorInfo* find(std::string_view name) const;
  // Like find(), but throws tide::Error naming the tensor and the folder when absent.
  const TensorInfo& require(std::string_view name) const;
  // All tensor names, sorted.
  std::vector<std::string> names() const;
  size_t size() const { return index_.size(); }
  const std::filesystem::path& dir() const { return dir_; }
  // The mapped files: one for a single-file checkpoint, one per distinct shard otherwise.
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  Checkpoint() = default;
  void build_index();

  std::filesystem::path dir_;
  std::vector<SafetensorsFile> files_;
  std::vector<const TensorInfo*> index_;  // into files_[*].tensors(), sorted by name
};

}  // namespace tide
