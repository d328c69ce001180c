// Checkpoint folder loading: picks the single file or the sharded index, validates the index (untrusted like
// the shards themselves: shard names must not escape the folder) and builds one sorted name index.
#include "model/checkpoint.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/error.h"

namespace tide {
namespace {

using nlohmann::json;

// An index lists names and file names only; anything this large is not an index.
constexpr uintmax_t kMaxIndexBytes = 100u << 20;

json read_index(const std::filesystem::path& path) {
  const std::string file = path.string();
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail("{}: cannot read: {}", file, ec.message());
  if (size > kMaxIndexBytes)
    fail("{}: {} bytes, larger than the {}-byte limit for an index", file, size, kMaxIndexBytes);
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) fail("{}: cannot read", file);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", file, e.what());
  }
}

// A shard must be a file directly inside the checkpoint folder: no separators, no "." or "..", no NUL.
bool is_plain_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of(std::string_view("/\\\0", 3)) == std::string_view::npos;
}

}  // namespace

Checkpoint Checkpoint::open(const std::filesystem::path& dir) {
  Checkpoint ckpt;
  ckpt.dir_ = dir;
  const std::filesystem::path single = dir / kSingleFileName;
  const std::filesystem::path index_path = dir / kIndexFileName;
  std::error_code ec;
  if (std::filesystem::exists(single, ec)) {
    ckpt.files_.push_back(SafetensorsFile::open(single));
    ckpt.build_index();
    return ckpt;
  }
  if (!std::filesystem::exists(index_path, ec)) {
    fail("{}: no checkpoint found: expected {} or {} in this folder", dir.string(), kSingleFileName, kIndexFileName);
  }

  const std::string index_file = index_path.string();
  const json index = read_index(index_path);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    fail("{}: expected an object with a \"weight_map\" object", index_file);
  }
  std::map<std::string, std::vector<std::string>> tensors_by_shard;  // ordered: deterministic opening order
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) fail("{}: weight_map entry for tensor '{}' is not a string", index_file, tensor);
    const auto& shard_name = shard.get_ref<const std::string&>();
    if (!is_plain_file_name(shard_name)) {
      fail("{}: tensor '{}': shard '{}' is not a plain file name inside {}", index_file, tensor, shard_name,
           dir.string());
    }
    tensors_by_shard[shard_name].push_back(tensor);
  }
  if (tensors_by_shard.empty()) fail("{}: weight_map is empty", index_file);

  for (const auto& [shard_name, tensors] : tensors_by_shard) {
    const std::filesystem::path shard_path = dir / shard_name;
    if (!std::filesystem::exists(shard_path, ec)) {
      fail("{}: shard file {} (holding tensor '{}') does not exist", index_file, shard_path.string(), tensors.front());
    }
    ckpt.files_.push_back(SafetensorsFile::open(shard_path));
    const SafetensorsFile& opened = ckpt.files_.back();
    for (const std::string& tensor : tensors) {
      if (opened.find(tensor) == nullptr) {
        fail("{}: tensor '{}' is listed for {} but that file does not contain it", index_file, tensor, opened.path());
      }
    }
  }
  ckpt.build_index();
  return ckpt;
}

void Checkpoint::build_index() {
  index_.clear();
  for (const SafetensorsFile& f : files_) {
    for (const TensorInfo& t : f.tensors()) index_.push_back(&t);
  }
  std::sort(index_.begin(), index_.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->name != b->name ? a->name < b->name : a->file < b->file;
  });
  auto dup = std::adjacent_find(index_.begin(), index_.end(),
                                [](const TensorInfo* a, const TensorInfo* b) { return a->name == b->name; });
  if (dup != index_.end()) {
    fail("{}: tensor '{}' is present in two files: {} and {}", dir_.string(), (*dup)->name, (*dup)->file, dup[1]->file);
  }
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto it = std::lower_bound(index_.begin(), index_.end(), name,
                             [](const TensorInfo* t, std::string_view n) { return t->name < n; });
  return it != index_.end() && (*it)->name == name ? *it : nullptr;
}

const TensorInfo& Checkpoint::require(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (t == nullptr) fail("{}: checkpoint has no tensor '{}'", dir_.string(), name);
  return *t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const TensorInfo* t : index_) out.push_back(t->name);
  return out;
}

}  // namespace tide
