// Model folders that do not hold what their config.json says, run through `tide generate`: each corrupted copy
// of the tiny fixture (truncated checkpoint, layer counts both ways, extra and missing tensors, wrong shapes,
// NaN and infinity in weights, sizes that would overflow, logit_scale 1e300, duplicate vocabulary ids,
// malformed generation_config.json, ...) ends with exit status 1 and a message naming the file and the field or
// tensor at fault, never a crash, a hang or a model that runs with the wrong weights.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "../test_util.h"
#include "cli_run.h"

namespace tide {
namespace {

// A tensor of the checkpoint held in memory, to change before writing it back.
struct OwnedTensor {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;

  void set_bf16(size_t index, uint16_t bits) { std::memcpy(bytes.data() + 2 * index, &bits, 2); }
};

constexpr uint16_t kBf16Nan = 0x7FC0, kBf16Inf = 0x7F80, kBf16NegInf = 0xFF80;

// A copy of the tiny fixture folder (config, checkpoint, tokenizer, generation config) in a temporary folder.
class ModelCopy {
 public:
  ModelCopy() {
    const std::filesystem::path from = test::fixture("cohere2-tiny");
    for (const char* name : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                             "generation_config.json"}) {
      std::filesystem::copy_file(from / name, dir_.path() / name);
    }
  }
  const std::filesystem::path& path() const { return dir_.path(); }

  void edit_json(const char* file, const std::function<void(nlohmann::json&)>& edit) const {
    nlohmann::json j = test::read_json(path() / file);
    edit(j);
    write_text(file, j.dump(1));
  }
  void write_text(const char* file, const std::string& text) const { std::ofstream(path() / file) << text; }

  void edit_tensors(const std::function<void(std::vector<OwnedTensor>&)>& edit) const {
    std::vector<OwnedTensor> tensors;
    {
      const SafetensorsFile file = SafetensorsFile::open(path() / "model.safetensors");
      for (const TensorInfo& t : file.tensors()) {
        const auto* data = reinterpret_cast<const unsigned char*>(t.data);
        tensors.push_back({t.name, t.dtype, t.shape, std::vector<unsigned char>(data, data + t.nbytes)});
      }
    }
    edit(tensors);
    std::vector<TensorToWrite> out;
    for (const OwnedTensor& t : tensors) out.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
    write_safetensors(path() / "model.safetensors", out);
  }

 private:
  test::TempDir dir_;
};

OwnedTensor& find(std::vector<OwnedTensor>& tensors, const std::string& name) {
  for (OwnedTensor& t : tensors) {
    if (t.name == name) return t;
  }
  throw std::runtime_error("no tensor " + name);
}

test::RunResult generate(const ModelCopy& model) {
  return test::run_tide("generate --model " + model.path().string() + " --prompt-ids 5,6 --max-tokens 2 --json");
}

struct Corruption {
  const char* what;
  std::function<void(const ModelCopy&)> apply;
  std::vector<std::string> needles;  // the file, the field or tensor, what is wrong
};

void set_config(const ModelCopy& m, const char* field, const nlohmann::json& value) {
  m.edit_json("config.json", [&](nlohmann::json& j) { j[field] = value; });
}

std::vector<Corruption> corruptions() {
  using Tensors = std::vector<OwnedTensor>;
  return {
      {"truncated checkpoint",
       [](const ModelCopy& m) {
         const auto file = m.path() / "model.safetensors";
         std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
       },
       {"model.safetensors", "truncated file"}},
      {"config declares fewer layers than the checkpoint holds",
       [](const ModelCopy& m) { set_config(m, "num_hidden_layers", 4); },
       {"config.json", "field 'num_hidden_layers' is 4", "layers 0-7"}},
      {"config declares more layers than the checkpoint holds",
       [](const ModelCopy& m) { set_config(m, "num_hidden_layers", 12); },
       {"config.json", "field 'num_hidden_layers' is 12", "layers 0-7", "no tensor of layer 8"}},
      {"a layer lacks a tensor",
       [](const ModelCopy& m) {
         m.edit_tensors([](Tensors& t) {
           std::erase_if(t, [](const OwnedTensor& x) { return x.name == "model.layers.5.mlp.up_proj.weight"; });
         });
       },
       {"no tensor 'model.layers.5.mlp.up_proj.weight'"}},
      {"a layer holds a tensor tide does not compute with",
       [](const ModelCopy& m) {
         m.edit_tensors([](Tensors& t) {
           t.push_back({"model.layers.2.self_attn.q_norm.weight", DType::kBF16, {32}, std::vector<unsigned char>(64)});
         });
       },
       {"model.safetensors", "tensor 'model.layers.2.self_attn.q_norm.weight' is not one tide computes with"}},
      {"a layer beyond num_hidden_layers",
       [](const ModelCopy& m) {
         m.edit_tensors([](Tensors& t) {
           t.push_back({"model.layers.8.input_layernorm.weight", DType::kBF16, {256}, std::vector<unsigned char>(512)});
         });
       },
       {"config.json", "field 'num_hidden_layers' is 8", "layers 0-8", "model.layers.8.input_layernorm.weight"}},
      {"a projection of the wrong shape",
       [](const ModelCopy& m) {
         m.edit_tensors([](Tensors& t) { find(t, "model.layers.1.mlp.up_proj.weight").shape = {256, 512}; });
       },
       {"model.safetensors", "tensor 'model.layers.1.mlp.up_proj.weight' has shape [256, 512], expected [512, 256]"}},
      {"vocab_size disagrees with the embedding", [](const ModelCopy& m) { set_config(m, "vocab_size", 2048); },
       {"model.safetensors", "tensor 'model.embed_tokens.weight' has shape [1024, 256], expected [2048, 256]"}},
      {"NaN in a layer norm",
       [](const ModelCopy& m) {
         m.edit_tensors([](Tensors& t) { find(t, "model.layers.3.input_layernorm.weight").set_bf16(7, kBf16Nan); });
       },
       {"model.safetensors", "tensor 'model.layers.3.input_layernorm.weight' holds NaN at element 7"}},
      {"infinity in the final norm",
       [](const ModelCopy& m) { m.edit_tensors([](Tensors& t) { find(t, "model.norm.weight").set_bf16(0, kBf16NegInf); }); },
       {"model.safetensors", "tensor 'model.norm.weight' holds -infinity at element 0"}},
      {"NaN in the embedding",
       [](const ModelCopy& m) {
         m.edit_tensors([](Tensors& t) { find(t, "model.embed_tokens.weight").set_bf16(1000 * 256 + 3, kBf16Nan); });
       },
       {"model.safetensors", "tensor 'model.embed_tokens.weight' holds NaN at element 256003 (row 1000, column 3)"}},
      {"infinity in a projection",
       [](const ModelCopy& m) {
         m.edit_tensors([](Tensors& t) { find(t, "model.layers.6.mlp.down_proj.weight").set_bf16(12345, kBf16Inf); });
       },
       {"model.safetensors", "tensor 'model.layers.6.mlp.down_proj.weight' holds +infinity at element 12345"}},
      {"max_position_embeddings that would overflow",
       [](const ModelCopy& m) { set_config(m, "max_position_embeddings", INT64_MAX); },
       {"config.json", "field 'max_position_embeddings' must be an integer in [1, 16777216]"}},
      {"sliding_window that would overflow", [](const ModelCopy& m) { set_config(m, "sliding_window", INT64_MAX); },
       {"config.json", "field 'sliding_window' must be an integer in [1, 16777216]"}},
      {"num_hidden_layers 2^40", [](const ModelCopy& m) { set_config(m, "num_hidden_layers", int64_t{1} << 40); },
       {"config.json", "field 'num_hidden_layers' must be an integer in [1, 1024], got 1099511627776"}},
      {"hidden_size that would overflow", [](const ModelCopy& m) { set_config(m, "hidden_size", int64_t{1} << 62); },
       {"config.json", "field 'hidden_size' must be an integer in [1, 131072]"}},
      {"logit_scale 1e300", [](const ModelCopy& m) { set_config(m, "logit_scale", 1e300); },
       {"config.json", "field 'logit_scale' must be a finite number in (0, 1000], got 1e+300"}},
      {"a size written as a string", [](const ModelCopy& m) { set_config(m, "intermediate_size", "512"); },
       {"config.json", "field 'intermediate_size' must be an integer"}},
      {"eos_token_id outside the vocabulary", [](const ModelCopy& m) { set_config(m, "eos_token_id", 4096); },
       {"config.json", "field 'eos_token_id' is 4096, outside the vocabulary (vocab_size 1024)"}},
      {"config.json that is not JSON", [](const ModelCopy& m) { m.write_text("config.json", "{\"vocab_size\": 1024,"); },
       {"config.json: not valid JSON"}},
      {"two vocabulary tokens with one id",
       [](const ModelCopy& m) { m.edit_json("tokenizer.json", [](nlohmann::json& j) { j["model"]["vocab"]["<UNK>"] = 0; }); },
       {"tokenizer.json: model.vocab", "both have id 0"}},
      {"two added tokens with one id",
       [](const ModelCopy& m) { m.edit_json("tokenizer.json", [](nlohmann::json& j) { j["added_tokens"][1]["id"] = 0; }); },
       {"tokenizer.json: added_tokens[1].id", "added tokens '<PAD>' and '<UNK>' both have id 0"}},
      {"an added token on another token's vocabulary id",
       [](const ModelCopy& m) { m.edit_json("tokenizer.json", [](nlohmann::json& j) { j["added_tokens"][0]["id"] = 300; }); },
       {"tokenizer.json: added_tokens[0].id", "added token '<PAD>' has id 300, which model.vocab gives to"}},
      {"generation_config.json that is not JSON",
       [](const ModelCopy& m) { m.write_text("generation_config.json", "{\"eos_token_id\": [6,"); },
       {"generation_config.json: not valid JSON"}},
      {"generation_config.json's eos_token_id of the wrong type",
       [](const ModelCopy& m) { m.edit_json("generation_config.json", [](nlohmann::json& j) { j["eos_token_id"] = "six"; }); },
       {"generation_config.json: field 'eos_token_id' must hold token ids in [0, 1024)", "got \"six\""}},
      {"generation_config.json's eos_token_id outside the vocabulary",
       [](const ModelCopy& m) {
         m.edit_json("generation_config.json", [](nlohmann::json& j) { j["eos_token_id"] = {6, 5000}; });
       },
       {"generation_config.json: field 'eos_token_id' must hold token ids in [0, 1024)", "got 5000"}},
      {"generation_config.json that is a list",
       [](const ModelCopy& m) { m.write_text("generation_config.json", "[6]"); },
       {"generation_config.json: must be a JSON object"}},
  };
}

TEST(ModelFiles, EveryCorruptedFolderIsRefusedNamingTheFileAndField) {
  for (const Corruption& c : corruptions()) {
    const ModelCopy model;
    c.apply(model);
    const test::RunResult r = generate(model);
    EXPECT_EQ(r.status, 1) << c.what << "\n" << r.out;
    EXPECT_EQ(r.out.rfind("tide: error: ", 0), 0u) << c.what << "\n" << r.out;
    for (const std::string& needle : c.needles) {
      EXPECT_NE(r.out.find(needle), std::string::npos) << c.what << ": no '" << needle << "' in\n" << r.out;
    }
  }
}

TEST(ModelFiles, TheUntouchedCopyRuns) {
  const ModelCopy model;
  model.edit_tensors([](std::vector<OwnedTensor>&) {});  // rewritten unchanged: the writer is not at fault above
  const test::RunResult r = generate(model);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["ids"].size(), 2u) << r.out;
}

// Tensors tide does not read outside the layers are named in a warning; the model still runs.
TEST(ModelFiles, TensorsOutsideTheLayersThatTideDoesNotReadAreNamedInAWarning) {
  const ModelCopy model;
  model.edit_tensors([](std::vector<OwnedTensor>& t) {
    t.push_back({"lm_head.weight", DType::kBF16, {1024, 256}, find(t, "model.embed_tokens.weight").bytes});
    t.push_back({"training.step", DType::kI64, {1}, std::vector<unsigned char>(8)});
    // Older checkpoints store RoPE's frequencies per layer: recomputed from the config, not warned about.
    t.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", DType::kF32, {16}, std::vector<unsigned char>(64)});
  });
  const test::RunResult r = generate(model);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("warning: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 tensor(s) of the checkpoint are not read by tide (tie_word_embeddings is true"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("'lm_head.weight', 'training.step'"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("inv_freq"), std::string::npos) << r.out;
}

// tide quantize reads the same folders: a checkpoint of other layers than config.json declares is refused
// before any FP8 file is written.
TEST(ModelFiles, QuantizeRefusesALayerCountMismatch) {
  const ModelCopy model;
  set_config(model, "num_hidden_layers", 6);
  const auto out = model.path() / "fp8";
  const test::RunResult r = test::run_tide("quantize --model " + model.path().string() + " --out " + out.string());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("config.json: field 'num_hidden_layers' is 6, but the checkpoint holds layers 0-7"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(out / "model.safetensors"));
}

// The tokenizer alone (tokenize) refuses a vocabulary with duplicate ids too.
TEST(ModelFiles, TokenizeRefusesDuplicateVocabularyIds) {
  const ModelCopy model;
  model.edit_json("tokenizer.json", [](nlohmann::json& j) { j["model"]["vocab"]["<UNK>"] = 0; });
  const test::RunResult r = test::run_tide("tokenize --model " + model.path().string() + " --text hi");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("tokenizer.json: model.vocab: tokens '<PAD>' and '<UNK>' both have id 0"), std::string::npos)
      << r.out;
}

}  // namespace
}  // namespace tide
