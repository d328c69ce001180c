// Helpers shared by tide's tests: fixture paths, JSON and golden tensors, error norms.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "model/safetensors.h"

namespace tide::test {

// Index of the largest value; the lowest index among equal maxima.
inline int32_t argmax(const std::vector<float>& values) {
  return static_cast<int32_t>(std::max_element(values.begin(), values.end()) - values.begin());
}

// The fixtures folder: $TIDE_FIXTURES_DIR when set (a build run from another checkout, e.g. on the GPU
// machine), else the source tree's tests/fixtures.
inline std::filesystem::path fixture(const std::string& relative) {
  const char* dir = std::getenv("TIDE_FIXTURES_DIR");
  return std::filesystem::path(dir && *dir ? dir : TIDE_FIXTURES_DIR) / relative;
}

// A model folder bundled with tide under models/ (models/tide-demo): $TIDE_MODELS_DIR when set, else the
// source tree's models/.
inline std::filesystem::path bundled_model(const std::string& name) {
  const char* dir = std::getenv("TIDE_MODELS_DIR");
  return std::filesystem::path(dir && *dir ? dir : TIDE_MODELS_DIR) / name;
}

inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) fail("cannot open {}", path.string());
  return nlohmann::json::parse(in);
}

// A golden tensor from a fixture's golden.safetensors, as f32.
inline std::vector<float> golden_tensor(const SafetensorsFile& file, const std::string& name) {
  const TensorInfo* t = file.find(name);
  if (!t) fail("golden tensor {} missing", name);
  std::vector<float> values(static_cast<size_t>(t->numel()));
  convert_to_f32(t->data, t->dtype, values.data(), values.size());
  return values;
}

// ||a - b|| / ||b||, accumulated in double.
inline double rel_l2(const float* a, const float* b, size_t n) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    diff += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    norm += double{b[i]} * b[i];
  }
  return std::sqrt(diff / norm);
}

inline std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

// A fresh, empty temporary directory, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("tide-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace tide::test
