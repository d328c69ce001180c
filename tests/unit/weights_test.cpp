// Loading a checkpoint into the model: every tensor is checked against the config before use, and a bad
// file is an error naming the tensor and the file, never a crash.
#include <gtest/gtest.h>

#include <fstream>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "model/checkpoint.h"
#include "model/cohere2.h"

namespace tide {
namespace {

// Copies the tiny fixture into a temp dir, rewriting model.safetensors through `edit`.
class BrokenCheckpoint {
 public:
  template <typename Edit>
  explicit BrokenCheckpoint(Edit edit) {
    const auto src = test::fixture("cohere2-tiny");
    std::filesystem::copy_file(src / "config.json", dir_.path() / "config.json");
    const SafetensorsFile file = SafetensorsFile::open(src / "model.safetensors");
    std::vector<TensorToWrite> tensors;
    for (const TensorInfo& t : file.tensors()) tensors.push_back({t.name, t.dtype, t.shape, t.data, t.nbytes});
    edit(tensors);
    write_safetensors(dir_.path() / "model.safetensors", tensors);
  }
  std::string load_error() const {
    CpuBackend backend;
    try {
      Cohere2Model::load(dir_.path(), backend);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  const std::filesystem::path& dir() const { return dir_.path(); }

 private:
  test::TempDir dir_;
};

TensorToWrite& find(std::vector<TensorToWrite>& tensors, const std::string& name) {
  for (TensorToWrite& t : tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}

TEST(Weights, FixtureLoads) {
  BrokenCheckpoint ok([](auto&) {});
  EXPECT_EQ(ok.load_error(), "");
}

// config.json declaring compressed-tensors FP8 over a bf16 checkpoint: refused, naming the mismatch.
TEST(Weights, Fp8ConfigOverAFloatCheckpointIsRefused) {
  BrokenCheckpoint c([](auto&) {});
  nlohmann::json config = test::read_json(c.dir() / "config.json");
  const nlohmann::json weights = {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}, {"dynamic", false}};
  config["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                   {"format", "float-quantized"},
                                   {"config_groups", {{"group_0", {{"weights", weights}}}}}};
  std::ofstream(c.dir() / "config.json") << config.dump();
  const std::string e = c.load_error();
  EXPECT_NE(e.find("quantization_config"), std::string::npos) << e;
  EXPECT_NE(e.find("F8_E4M3"), std::string::npos) << e;
}

TEST(Weights, MissingTensorIsNamed) {
  BrokenCheckpoint c([](std::vector<TensorToWrite>& t) {
    std::erase_if(t, [](const TensorToWrite& x) { return x.name == "model.layers.5.mlp.up_proj.weight"; });
  });
  const std::string e = c.load_error();
  EXPECT_NE(e.find("model.layers.5.mlp.up_proj.weight"), std::string::npos) << e;
}

TEST(Weights, WrongShapeIsNamedWithBothShapes) {
  BrokenCheckpoint c([](std::vector<TensorToWrite>& t) {
    TensorToWrite& k = find(t, "model.layers.2.self_attn.k_proj.weight");
    k.shape = {k.shape[1], k.shape[0]};  // transposed: same bytes, wrong shape
  });
  const std::string e = c.load_error();
  EXPECT_NE(e.find("model.layers.2.self_attn.k_proj.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  EXPECT_NE(e.find("[64, 256]"), std::string::npos) << e;
}

TEST(Weights, WrongDtypeIsNamed) {
  BrokenCheckpoint c([](std::vector<TensorToWrite>& t) {
    TensorToWrite& n = find(t, "model.norm.weight");
    n.dtype = DType::kI32;  // 256 bf16 = 512 bytes = 128 i32: keep the byte size consistent
    n.shape = {128};
  });
  std::string e = c.load_error();
  EXPECT_NE(e.find("model.norm.weight"), std::string::npos) << e;

  static std::vector<uint8_t> fp8(256 * 256);
  BrokenCheckpoint f8([](std::vector<TensorToWrite>& t) {
    TensorToWrite& q = find(t, "model.layers.0.self_attn.q_proj.weight");
    q.dtype = DType::kF8E4M3;
    q.data = fp8.data();
    q.nbytes = fp8.size();
  });
  e = f8.load_error();
  EXPECT_NE(e.find("F8_E4M3"), std::string::npos) << e;
  EXPECT_NE(e.find("q_proj"), std::string::npos) << e;
  EXPECT_NE(e.find("weight_scale"), std::string::npos) << e;

  // FP8 is for linear weights only: an FP8 norm is refused by name.
  static std::vector<uint8_t> fp8_norm(256);
  BrokenCheckpoint norm8([](std::vector<TensorToWrite>& t) {
    TensorToWrite& n = find(t, "model.norm.weight");
    n.dtype = DType::kF8E4M3;
    n.data = fp8_norm.data();
    n.nbytes = fp8_norm.size();
  });
  e = norm8.load_error();
  EXPECT_NE(e.find("model.norm.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("linear"), std::string::npos) << e;
}

TEST(Weights, TruncatedFileIsAnErrorNamingTheFile) {
  BrokenCheckpoint c([](auto&) {});
  const auto path = c.dir() / "model.safetensors";
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  const std::string e = c.load_error();
  EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
}

TEST(Weights, MissingCheckpointAndConfigAreErrors) {
  test::TempDir empty;
  CpuBackend backend;
  EXPECT_THROW(Cohere2Model::load(empty.path(), backend), Error);
  std::filesystem::copy_file(test::fixture("cohere2-tiny/config.json"), empty.path() / "config.json");
  try {
    Cohere2Model::load(empty.path(), backend);
    FAIL() << "no checkpoint, no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tide
