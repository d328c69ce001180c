#include "apps/tide/cli_util.h"

#include <charconv>
#include <iostream>

#include "backend/cpu/cpu_backend.h"
#ifdef TIDE_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#include "core/error.h"

namespace tide::cli {

std::vector<int32_t> parse_ids(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    int32_t id = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || id < 0) {
      fail("{}: '{}' is not a token id (expected non-negative integers separated by commas)", flag, item);
    }
    ids.push_back(id);
    pos = comma + 1;
  }
  return ids;
}

std::unique_ptr<Backend> make_backend(const std::string& device) {
#ifdef TIDE_HAVE_CUDA
  if (device == "cuda" || (device == "auto" && CudaBackend::available())) return std::make_unique<CudaBackend>();
#else
  if (device == "cuda") fail("--device cuda: this build of tide has no CUDA backend (built without nvcc)");
#endif
  if (device == "cpu" || device == "auto") return std::make_unique<CpuBackend>();
  fail("--device: unknown device '{}' (cpu, cuda or auto)", device);
}

void print_json(const nlohmann::json& j) {
  std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
}

}  // namespace tide::cli
