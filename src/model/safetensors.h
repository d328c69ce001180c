// Safetensors files: a validating, memory-mapped reader (SafetensorsFile) and a small writer
// (write_safetensors). Files are untrusted input: every malformed file is rejected with a tide::Error that
// names the file (and the tensor, where one is involved) before any tensor byte is handed out.
// Non-goals: dtypes tide does not know (BOOL, I8, F64, ...), big-endian hosts, files that change while mapped
// (a file truncated by another process after opening can still raise SIGBUS: that is the OS, not the format).
// Multi-file (sharded) checkpoints live in model/checkpoint.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace tide {

// Largest JSON header accepted (the same bound Hugging Face's safetensors uses); guards against a corrupt
// length field making us parse gigabytes.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// One tensor inside a mapped file. `data` points into the mapping and stays valid while the owning
// SafetensorsFile / Checkpoint lives. It may be UNALIGNED (a safetensors data region starts at 8 + N for any
// N, and other writers do not align tensors): read elements with memcpy, never by casting to float* etc.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // any rank; empty = 0-dim scalar
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // path of the file it lives in, for messages

  int64_t numel() const;
  std::string shape_str() const;  // "[1024, 256]"
};

using StringMap = std::map<std::string, std::string>;

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates the whole header (see safetensors.cpp for the list of checks).
  // Throws tide::Error naming the file when it cannot be opened or mapped, or is malformed; the message also
  // names the tensor when one entry is at fault.
  static SafetensorsFile open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  // nullptr when the file has no tensor of that name.
  const TensorInfo* find(std::string_view name) const;
  // All tensors, sorted by name. Moving the SafetensorsFile keeps these objects (and pointers to them) valid.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // The header's "__metadata__" (empty when absent).
  const StringMap& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  void unmap() noexcept;

  std::string path_;
  void* map_base_ = nullptr;  // null when moved-from
  size_t map_size_ = 0;
  std::vector<TensorInfo> tensors_;
  StringMap metadata_;
};

// A tensor to write; `data` must hold exactly `nbytes` = numel * dtype_size bytes (nullptr allowed when 0).
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};

// Writes a safetensors file readable by Hugging Face's safetensors and by SafetensorsFile. The header is
// padded with spaces to a multiple of 8 (as HF does); tensors are laid out by element size descending, then
// name, so that every tensor is naturally aligned relative to the 8-aligned data region — a deterministic
// output for a given input, whatever the order of `tensors`. "__metadata__" is written only when non-empty.
// Writes `path` + ".tmp" first, fsyncs it, then renames it over `path`: a crash never leaves a partial file
// under the real name. Throws tide::Error (naming the file or the tensor) on a duplicate or reserved name, a
// negative dimension, nbytes != numel * dtype size, or an I/O failure (the .tmp file is then removed).
void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const StringMap& metadata = {});

}  // namespace tide
