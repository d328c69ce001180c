// Safetensors reader and writer. The reader checks, in order: file size >= 8; header length N <= 100 MiB and
// <= file size - 8; header is JSON (no duplicate top-level keys) and an object; "__metadata__" is an object of
// strings; each tensor entry is an object with a string "dtype" known to tide, an integer array "shape" with
// no negative dimension, and "data_offsets" = [begin, end] of non-negative integers; begin <= end <= data
// size; numel * dtype size (overflow-checked) == end - begin; no two non-empty tensors overlap. Gaps and
// trailing bytes are tolerated (they are unreadable through this API, so they cannot leak garbage).
#include "model/safetensors.h"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <system_error>
#include <tuple>

#include "core/error.h"

namespace tide {
namespace {

using nlohmann::json;

std::string errno_text() { return std::system_category().message(errno); }

// Names come from untrusted files: keep messages readable even for a megabyte-long name.
std::string shown(std::string_view s) {
  constexpr size_t kMax = 200;
  return s.size() <= kMax ? fmt::format("'{}'", s) : fmt::format("'{}...' ({} bytes)", s.substr(0, kMax), s.size());
}

// A JSON value for a message: scalars verbatim, containers by type only (dumping them could be huge or deep).
std::string describe(const json& v) {
  return v.is_structured() ? std::string("a JSON ") + v.type_name() : shown(v.dump());
}

// Closes a file descriptor on every path out of a scope.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
};

// Reads a non-negative JSON integer that fits in int64 (both dimensions and offsets use this range).
bool as_count(const json& v, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  *out = v.get<uint64_t>();
  return *out <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

TensorInfo parse_entry(const std::string& file, const std::string& name, const json& entry,
                       const std::byte* data_region, uint64_t data_size, uint64_t* begin_out) {
  const std::string where = fmt::format("{}: tensor {}", file, shown(name));
  if (!entry.is_object()) fail("{}: header entry is a JSON {}, expected an object", where, entry.type_name());
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) fail("{}: header entry has no \"{}\"", where, key);
  }
  const json& dtype_json = entry["dtype"];
  if (!dtype_json.is_string()) fail("{}: \"dtype\" is a JSON {}, expected a string", where, dtype_json.type_name());
  const auto& dtype_text = dtype_json.get_ref<const std::string&>();
  const std::optional<DType> dtype = parse_dtype(dtype_text);
  if (!dtype) {
    fail("{}: dtype {} is not supported (tide reads F32, F16, BF16, F8_E4M3, I32, I64)", where, shown(dtype_text));
  }

  TensorInfo info{name, *dtype, {}, nullptr, 0, file};
  const json& shape = entry["shape"];
  if (!shape.is_array()) fail("{}: \"shape\" is a JSON {}, expected an array", where, shape.type_name());
  uint64_t numel = 1;
  bool numel_overflow = false;
  for (const json& d : shape) {
    uint64_t dim;
    if (d.is_number_integer() && !d.is_number_unsigned())
      fail("{}: shape has negative dimension {}", where, d.get<int64_t>());
    if (!as_count(d, &dim)) fail("{}: shape dimension {} is not an integer in [0, 2^63)", where, describe(d));
    numel_overflow = numel_overflow || __builtin_mul_overflow(numel, dim, &numel);
    info.shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t expected_bytes = 0;
  numel_overflow = numel_overflow || __builtin_mul_overflow(numel, dtype_size(*dtype), &expected_bytes);

  const json& offsets = entry["data_offsets"];
  uint64_t begin = 0, end = 0;
  if (!offsets.is_array() || offsets.size() != 2 || !as_count(offsets[0], &begin) || !as_count(offsets[1], &end)) {
    fail("{}: \"data_offsets\" must be [begin, end] of non-negative integers", where);
  }
  if (begin > end) fail("{}: data_offsets [{}, {}] has begin > end", where, begin, end);
  if (end > data_size) {
    fail("{}: data_offsets [{}, {}] extend past the {}-byte data region (truncated file?)", where, begin, end,
         data_size);
  }
  if (numel_overflow || expected_bytes != end - begin) {
    fail("{}: shape {} of {} needs {} bytes but data_offsets [{}, {}] span {}", where, info.shape_str(), dtype_text,
         numel_overflow ? std::string("more than 2^64") : std::to_string(expected_bytes), begin, end, end - begin);
  }
  info.data = data_region + begin;
  info.nbytes = static_cast<size_t>(end - begin);
  *begin_out = begin;
  return info;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // cannot overflow: validated against the file size
  return n;
}

std::string TensorInfo::shape_str() const { return fmt::format("[{}]", fmt::join(shape, ", ")); }

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile f;
  f.path_ = path.string();
  const std::string& file = f.path_;
  // O_NONBLOCK so that a FIFO named like a model file cannot hang us before the regular-file check.
  FdGuard fd{::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (fd.fd < 0) fail("{}: cannot open: {}", file, errno_text());
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) fail("{}: cannot stat: {}", file, errno_text());
  if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", file);
  const auto file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) fail("{}: file is {} bytes, too short for the 8-byte header length", file, file_size);
  void* base = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (base == MAP_FAILED) fail("{}: cannot mmap {} bytes: {}", file, file_size, errno_text());
  f.map_base_ = base;  // from here on, f's destructor unmaps if validation throws
  f.map_size_ = file_size;
  const auto* bytes = static_cast<const std::byte*>(base);

  uint64_t header_len = 0;  // little-endian regardless of host order
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | std::to_integer<uint64_t>(bytes[i]);
  if (header_len > kMaxSafetensorsHeaderBytes) {
    fail("{}: header length {} exceeds the {}-byte limit (corrupt file?)", file, header_len,
         kMaxSafetensorsHeaderBytes);
  }
  if (header_len > file_size - 8) {
    fail("{}: header length {} exceeds the {} bytes after the length field (truncated file?)", file, header_len,
         file_size - 8);
  }

  // nlohmann keeps the last of duplicate keys silently; a duplicate tensor name is ambiguous, so spot it.
  std::string duplicate;
  std::set<std::string> seen;
  json header;
  try {
    const char* text = reinterpret_cast<const char*>(bytes + 8);
    header = json::parse(text, text + header_len, [&](int depth, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::key && depth == 1 && parsed.is_string() &&
          !seen.insert(parsed.get<std::string>()).second && duplicate.empty()) {
        duplicate = parsed.get<std::string>();
      }
      return true;
    });
  } catch (const json::exception& e) {
    fail("{}: header is not valid JSON: {}", file, e.what());
  }
  if (!header.is_object()) fail("{}: header is a JSON {}, expected an object", file, header.type_name());
  if (!duplicate.empty()) fail("{}: tensor {}: name appears twice in the header", file, shown(duplicate));

  const std::byte* data_region = bytes + 8 + header_len;
  const uint64_t data_size = file_size - 8 - header_len;
  std::vector<std::tuple<uint64_t, uint64_t, size_t>> extents;  // (begin, end, index) of non-empty tensors
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("{}: \"__metadata__\" is a JSON {}, expected an object", file, entry.type_name());
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail("{}: \"__metadata__\" value for {} is not a string", file, shown(key));
        f.metadata_.emplace(key, value.get<std::string>());
      }
      continue;
    }
    uint64_t begin = 0;
    f.tensors_.push_back(parse_entry(file, name, entry, data_region, data_size, &begin));
    if (f.tensors_.back().nbytes > 0)
      extents.emplace_back(begin, begin + f.tensors_.back().nbytes, f.tensors_.size() - 1);
  }
  std::sort(extents.begin(), extents.end());
  for (size_t i = 1; i < extents.size(); ++i) {
    const auto& [prev_begin, prev_end, prev] = extents[i - 1];
    const auto& [begin, end, cur] = extents[i];
    if (begin < prev_end) {
      fail("{}: tensors {} (bytes [{}, {})) and {} (bytes [{}, {})) overlap", file, shown(f.tensors_[prev].name),
           prev_begin, prev_end, shown(f.tensors_[cur].name), begin, end);
    }
  }
  // json objects iterate in key order, so tensors_ is already sorted by name; sort anyway to not rely on it.
  std::sort(f.tensors_.begin(), f.tensors_.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return f;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_base_ = std::exchange(other.map_base_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    tensors_ = std::move(other.tensors_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() noexcept {
  if (map_base_ != nullptr) ::munmap(map_base_, map_size_);
  map_base_ = nullptr;
  map_size_ = 0;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

void write_safetensors(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                       const StringMap& metadata) {
  const std::string file = path.string();
  std::set<std::string_view> names;
  for (const TensorToWrite& t : tensors) {
    const std::string where = fmt::format("{}: tensor {}", file, shown(t.name));
    if (t.name == "__metadata__") fail("{}: the name is reserved for the header's metadata", where);
    if (!names.insert(t.name).second) fail("{}: name given twice", where);
    uint64_t bytes = dtype_size(t.dtype);
    bool overflow = false;
    for (int64_t d : t.shape) {
      if (d < 0) fail("{}: negative dimension {}", where, d);
      overflow = overflow || __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes);
    }
    if (overflow || bytes != t.nbytes) fail("{}: nbytes {} does not match shape and dtype", where, t.nbytes);
    if (t.nbytes > 0 && t.data == nullptr) fail("{}: data is null", where);
  }

  // Element size descending, then name: each tensor starts at a multiple of its element size.
  std::vector<const TensorToWrite*> order;
  for (const TensorToWrite& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorToWrite* a, const TensorToWrite* b) {
    const size_t sa = dtype_size(a->dtype), sb = dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite* t : order) {
    header[t->name] = {
        {"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->nbytes}}};
    offset += t->nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // e.g. a name that is not valid UTF-8
    fail("{}: cannot encode header: {}", file, e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix(8, '\0');
  for (size_t i = 0; i < 8; ++i) prefix[i] = static_cast<char>((text.size() >> (8 * i)) & 0xffu);

  const std::string tmp = file + ".tmp";
  FdGuard fd{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (fd.fd < 0) fail("{}: cannot create: {}", tmp, errno_text());
  auto give_up = [&](const char* what) {
    const std::string reason = errno_text();
    ::unlink(tmp.c_str());
    fail("{}: {} failed: {}", tmp, what, reason);
  };
  auto write_all = [&](const void* data, size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd.fd, p, std::min<size_t>(size, size_t{1} << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) give_up("write");
      p += n;
      size -= static_cast<size_t>(n);
    }
  };
  write_all(prefix.data(), prefix.size());
  write_all(text.data(), text.size());
  for (const TensorToWrite* t : order) write_all(t->data, t->nbytes);
  // fsync before rename, so that after a crash the real name holds either the old file or the whole new one.
  if (::fsync(fd.fd) != 0) give_up("fsync");
  if (::close(std::exchange(fd.fd, -1)) != 0) give_up("close");
  if (::rename(tmp.c_str(), file.c_str()) != 0) give_up("rename");
}

}  // namespace tide
