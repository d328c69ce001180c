#include "model/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/fp8.h"
#include "model/checkpoint.h"
#include "model/checkpoint_checks.h"
#include "model/config.h"

namespace tide {
namespace {

// The linear layers' weights, the tensors that become FP8.
bool is_linear_weight(const std::string& name) {
  static const std::regex pattern(R"(model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.(gate|up|down)_proj)\.weight)");
  return std::regex_match(name, pattern);
}

// A tensor of the output: FP8 codes and scales computed here, or the input's bytes.
struct OutTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // into the input's mapping, or into `owned`
  size_t nbytes = 0;
  std::vector<std::byte> owned;
};

// Rowwise FP8 of a float [out, in] weight: codes and [out, 1] f32 scales.
void quantize_rows(const TensorInfo& t, OutTensor& codes, OutTensor& scales) {
  const int64_t rows = t.shape[0], cols = t.shape[1];
  codes = OutTensor{t.name, DType::kF8E4M3, t.shape, nullptr, static_cast<size_t>(rows * cols), {}};
  scales = OutTensor{t.name + "_scale", DType::kF32, {rows, 1}, nullptr, static_cast<size_t>(rows) * 4, {}};
  codes.owned.resize(codes.nbytes);
  scales.owned.resize(scales.nbytes);
  std::vector<float> row(static_cast<size_t>(cols));
  const size_t row_bytes = static_cast<size_t>(cols) * dtype_size(t.dtype);
  for (int64_t r = 0; r < rows; ++r) {
    convert_to_f32(t.data + static_cast<size_t>(r) * row_bytes, t.dtype, row.data(), row.size());
    for (float v : row) {
      if (!std::isfinite(v)) fail("{}: tensor '{}' has a non-finite value in row {}", t.file, t.name, r);
    }
    auto* out = reinterpret_cast<uint8_t*>(codes.owned.data()) + static_cast<size_t>(r * cols);
    const float scale = fp8::quantize_row(row.data(), cols, out);
    std::memcpy(scales.owned.data() + static_cast<size_t>(r) * 4, &scale, 4);
  }
  codes.data = codes.owned.data();
  scales.data = scales.owned.data();
}

// compressed-tensors' description of rowwise FP8 weights with dynamic per-token FP8 activations.
nlohmann::ordered_json quantization_config() {
  const nlohmann::ordered_json weights = {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"},
                                          {"symmetric", true}, {"dynamic", false}, {"group_size", nullptr},
                                          {"observer", "minmax"}};
  const nlohmann::ordered_json activations = {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"},
                                              {"symmetric", true}, {"dynamic", true}, {"group_size", nullptr},
                                              {"observer", nullptr}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups",
           {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", activations}}}}},
          {"ignore", {"lm_head"}},
          {"kv_cache_scheme", nullptr},
          {"producer", "tide quantize"}};
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) fail("cannot write {}", path.string());
}

}  // namespace

QuantizeReport quantize_checkpoint_fp8(const std::filesystem::path& in_dir, const std::filesystem::path& out_dir,
                                       int64_t max_shard_bytes, const std::function<void(int64_t, int64_t)>& progress) {
  namespace fs = std::filesystem;
  if (max_shard_bytes <= 0) fail("the shard size must be positive, got {}", max_shard_bytes);
  std::error_code ec;
  if (fs::exists(out_dir) && fs::equivalent(in_dir, out_dir, ec)) {
    fail("the output folder must differ from the input folder ({})", out_dir.string());
  }
  if (fs::exists(out_dir) && !(fs::is_directory(out_dir) && fs::is_empty(out_dir))) {
    fail("{} exists and is not an empty folder: tide quantize does not overwrite", out_dir.string());
  }
  const ModelConfig config = ModelConfig::from_dir(in_dir);  // validates: a Cohere2 folder
  const Checkpoint ckpt = Checkpoint::open(in_dir);
  // A checkpoint of other layers than config.json declares would give an FP8 folder that no load accepts.
  check_tensor_inventory(config, ckpt);

  // Plan the shards in name order (deterministic), quantized sizes counted.
  const std::vector<std::string> names = ckpt.names();
  QuantizeReport report;
  std::vector<std::vector<std::string>> shards(1);
  int64_t shard_bytes = 0;
  for (const std::string& name : names) {
    const TensorInfo& t = ckpt.require(name);
    report.bytes_in += static_cast<int64_t>(t.nbytes);
    const bool linear = is_linear_weight(name);
    if (linear && t.dtype == DType::kF8E4M3) fail("{}: tensor '{}' is already F8_E4M3", t.file, name);
    if (linear && (t.shape.size() != 2 || (t.dtype != DType::kBF16 && t.dtype != DType::kF16 && t.dtype != DType::kF32))) {
      fail("{}: tensor '{}' must be a 2-D float tensor, got {} {}", t.file, name, dtype_name(t.dtype), t.shape_str());
    }
    const int64_t out_bytes = linear ? t.numel() + t.shape[0] * 4 : static_cast<int64_t>(t.nbytes);
    if (shard_bytes > 0 && shard_bytes + out_bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(name);
    shard_bytes += out_bytes;
  }

  fs::create_directories(out_dir);
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  int64_t done = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shards.size() == 1 ? std::string(kSingleFileName)
                                                : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
    std::vector<OutTensor> out;
    out.reserve(2 * shards[s].size());
    for (const std::string& name : shards[s]) {
      const TensorInfo& t = ckpt.require(name);
      if (is_linear_weight(name)) {
        OutTensor codes, scales;
        quantize_rows(t, codes, scales);
        out.push_back(std::move(codes));
        out.push_back(std::move(scales));
        ++report.num_quantized;
      } else {
        out.push_back(OutTensor{name, t.dtype, t.shape, t.data, t.nbytes, {}});
        ++report.num_copied;
      }
      done += static_cast<int64_t>(t.nbytes);
      if (progress) progress(done, report.bytes_in);
    }
    std::vector<TensorToWrite> writes;
    for (const OutTensor& o : out) {
      writes.push_back(TensorToWrite{o.name, o.dtype, o.shape, o.data, o.nbytes});
      weight_map[o.name] = file;
      report.bytes_out += static_cast<int64_t>(o.nbytes);
    }
    write_safetensors(out_dir / file, writes, StringMap{{"format", "pt"}});
    ++report.num_shards;
  }
  if (shards.size() > 1) {
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", report.bytes_out}}}, {"weight_map", weight_map}};
    write_text(out_dir / kIndexFileName, index.dump(2) + "\n");
  }

  // config.json with the quantization config; every other non-weight file as it is.
  std::ifstream config_in(in_dir / "config.json");
  nlohmann::ordered_json config_json = nlohmann::ordered_json::parse(config_in);  // from_dir parsed it already
  config_json["quantization_config"] = quantization_config();
  write_text(out_dir / "config.json", config_json.dump(2) + "\n");
  for (const fs::directory_entry& e : fs::directory_iterator(in_dir)) {
    const std::string name = e.path().filename().string();
    const bool weights = e.path().extension() == ".safetensors" || name == kIndexFileName;
    if (!e.is_regular_file() || weights || name == "config.json") continue;
    fs::copy_file(e.path(), out_dir / name, fs::copy_options::overwrite_existing);
  }
  return report;
}

}  // namespace tide
