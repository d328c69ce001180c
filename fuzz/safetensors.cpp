// Fuzzes the safetensors reader (model/safetensors.h) with whole files: the input is the file's bytes. A file
// the reader accepts must hand out tensors that lie inside it and whose sizes match their shapes, and writing
// those tensors back with write_safetensors must give a file that reads back the same.
#include "model/safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"

namespace {

using tide::SafetensorsFile;
using tide::TensorInfo;

// An in-memory file holding `data`, opened by path through /proc/self/fd as a model file would be.
struct MemoryFile {
  int fd = -1;
  MemoryFile(const uint8_t* data, size_t size) {
    fd = memfd_create("safetensors", MFD_CLOEXEC);
    FUZZ_CHECK(fd >= 0);
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd, data + done, size - done);
      FUZZ_CHECK(n > 0);
      done += static_cast<size_t>(n);
    }
  }
  ~MemoryFile() { ::close(fd); }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd); }
};

// Where the round trip writes its file (tmpfs-backed /dev/shm when present: write_safetensors fsyncs).
const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path base = std::filesystem::exists("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                                     : std::filesystem::temp_directory_path();
    std::filesystem::path d = base / ("tide-fuzz-safetensors-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return dir;
}

// Reads every byte of `t`, so that a tensor pointing outside the mapping is a crash here.
uint64_t touch(const TensorInfo& t) {
  uint64_t sum = 0;
  for (size_t i = 0; i < t.nbytes; ++i) sum += std::to_integer<uint8_t>(t.data[i]);
  return sum;
}

void round_trip(const SafetensorsFile& file) {
  std::vector<tide::TensorToWrite> out;
  for (const TensorInfo& t : file.tensors()) out.push_back({t.name, t.dtype, t.shape, t.data, t.nbytes});
  const std::filesystem::path path = scratch_dir() / "round_trip.safetensors";
  tide::write_safetensors(path, out, file.metadata());
  const SafetensorsFile back = SafetensorsFile::open(path);
  FUZZ_CHECK(back.tensors().size() == file.tensors().size());
  FUZZ_CHECK(back.metadata() == file.metadata());
  for (size_t i = 0; i < back.tensors().size(); ++i) {
    const TensorInfo& a = file.tensors()[i];
    const TensorInfo& b = back.tensors()[i];
    FUZZ_CHECK(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.nbytes == b.nbytes);
    FUZZ_CHECK(a.nbytes == 0 || std::memcmp(a.data, b.data, a.nbytes) == 0);
    FUZZ_CHECK(back.find(a.name) == &b);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  MemoryFile memory(data, size);
  std::optional<SafetensorsFile> file;
  if (!tide::fuzz::accepted([&] { file.emplace(SafetensorsFile::open(memory.path())); })) return 0;
  uint64_t sum = 0;
  for (const TensorInfo& t : file->tensors()) {
    FUZZ_CHECK(t.numel() >= 0);
    FUZZ_CHECK(static_cast<uint64_t>(t.numel()) * tide::dtype_size(t.dtype) == t.nbytes);
    FUZZ_CHECK(t.nbytes <= size);
    (void)t.shape_str();
    sum += touch(t);
  }
  (void)sum;
  // Outside accepted(): a file the reader accepts must be writable and read back, so an error here is a finding.
  round_trip(*file);
  return 0;
}
