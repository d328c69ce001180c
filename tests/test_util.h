// Helpers shared by tide's tests: fixture paths, JSON and golden tensors, error norms.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
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

// A copy of model folder `from` in `to` (config.json, and the tokenizer files when present) whose
// model.safetensors holds every tensor of `from`'s model.safetensors as `dtype` (F32 or F16, converted from
// the stored values; F16 rounds to nearest even): checkpoints of other float dtypes than the fixtures' bf16.
inline void write_model_as(const std::filesystem::path& from, const std::filesystem::path& to, DType dtype) {
  std::filesystem::create_directories(to);
  for (const char* name : {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"}) {
    if (std::filesystem::exists(from / name)) std::filesystem::copy_file(from / name, to / name);
  }
  const SafetensorsFile file = SafetensorsFile::open(from / "model.safetensors");
  std::vector<std::vector<unsigned char>> storage;
  std::vector<TensorToWrite> tensors;
  for (const TensorInfo& t : file.tensors()) {
    const auto n = static_cast<size_t>(t.numel());
    std::vector<float> f32(n);
    convert_to_f32(t.data, t.dtype, f32.data(), n);
    std::vector<unsigned char>& bytes = storage.emplace_back(n * dtype_size(dtype));
    for (size_t i = 0; i < n; ++i) {
      if (dtype == DType::kF32) {
        std::memcpy(bytes.data() + 4 * i, &f32[i], 4);
      } else {
        const uint16_t h = f32_to_f16(f32[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
    }
    tensors.push_back({t.name, dtype, t.shape, bytes.data(), bytes.size()});
  }
  write_safetensors(to / "model.safetensors", tensors);
}

// Prompts of random tokens that quote themselves (a span repeated, as a retrieval answer quotes its document),
// so that speculative decoding's prompt lookup finds drafts, and one random prompt.
inline std::vector<std::vector<int32_t>> quoting_prompts(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  auto token = [&] { return static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab)); };
  std::vector<std::vector<int32_t>> prompts;
  for (int span : {5, 12, 30}) {
    std::vector<int32_t> quoted, p;
    for (int i = 0; i < span; ++i) quoted.push_back(token());
    for (int i = 0; i < 7; ++i) p.push_back(token());
    p.insert(p.end(), quoted.begin(), quoted.end());
    for (int i = 0; i < 3; ++i) p.push_back(token());
    p.insert(p.end(), quoted.begin(), quoted.begin() + span / 2);  // the answer starts quoting
    prompts.push_back(p);
  }
  std::vector<int32_t> random(40);
  for (int32_t& t : random) t = token();
  prompts.push_back(random);
  return prompts;
}

// Text for the bundled demo model that quotes a passage and starts quoting it again: the passage, " Again: "
// and its first `cut` characters (its continuation copies spans of the prompt, so drafts get accepted).
inline std::string quoted_passage(size_t cut) {
  const std::string passage =
      "The river rises in the hills above the town and runs through the old mill, where the water turns the "
      "wheel before it reaches the sea. In winter the river floods the fields, and in summer the children swim "
      "in it below the bridge.";
  return passage + " Again: " + passage.substr(0, cut);
}

}  // namespace tide::test
