// Tests for the safetensors reader/writer and checkpoint folders: the real fixture, round trips, sharding,
// and a catalogue of malformed files that must each be rejected with a message naming the file (and tensor).
#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "model/checkpoint.h"

namespace tide {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device rd;
    path_ = fs::temp_directory_path() / ("tide_safetensors_test_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(counter++) + "_" + std::to_string(rd()));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_all(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A raw safetensors file: length prefix + header text + data bytes.
std::string raw_file(const std::string& header, size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\x01');
}

// Runs `f`, expecting a tide::Error whose message holds every one of `parts`; returns the message.
template <typename F>
std::string expect_error(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& part : parts)
      EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
    return msg;
  }
  ADD_FAILURE() << "expected a tide::Error";
  return {};
}

// Writes `bytes` to a file and expects opening it to fail naming the file and `parts`.
void expect_bad_file(const std::string& bytes, std::initializer_list<std::string> parts) {
  TempDir dir;
  const fs::path file = dir / "bad.safetensors";
  write_all(file, bytes);
  const std::string msg = expect_error([&] { SafetensorsFile::open(file); }, {file.string()});
  for (const std::string& part : parts)
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
}

// --- The real fixture --------------------------------------------------------------------------------

TEST(Safetensors, OpensCohereFixtureAndMatchesRawBytes) {
  const fs::path dir = fs::path(TIDE_FIXTURES_DIR) / "cohere2-tiny";
  const fs::path file = dir / "model.safetensors";
  const SafetensorsFile st = SafetensorsFile::open(file);
  EXPECT_EQ(st.metadata().at("format"), "pt");

  const TensorInfo* embed = st.find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->dtype, DType::kBF16);
  EXPECT_EQ(embed->shape, (std::vector<int64_t>{1024, 256}));
  EXPECT_EQ(embed->nbytes, 1024u * 256u * 2u);
  EXPECT_EQ(embed->file, file.string());
  const TensorInfo* q = st.find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::kBF16);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(st.find("model.no_such_tensor"), nullptr);

  // Independently of the reader: parse the file with plain reads and compare selected elements.
  const std::string raw = read_all(file);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(raw[static_cast<size_t>(i)]);
  const auto header = nlohmann::json::parse(raw.substr(8, header_len));
  for (const TensorInfo* t : {embed, q}) {
    const uint64_t begin = header[t->name]["data_offsets"][0].get<uint64_t>();
    const size_t numel = static_cast<size_t>(t->numel());
    int nonzero = 0;
    for (size_t i : {size_t{0}, size_t{1}, size_t{257}, numel / 2, numel - 1}) {
      const size_t at = 8 + header_len + begin + 2 * i;
      const uint16_t expected_bits =
          static_cast<uint16_t>(static_cast<unsigned char>(raw[at]) | (static_cast<unsigned char>(raw[at + 1]) << 8));
      uint16_t bits;
      std::memcpy(&bits, t->data + 2 * i, 2);  // data may be unaligned
      const float expected = bf16_to_f32(expected_bits);
      EXPECT_EQ(bf16_to_f32(bits), expected) << t->name << "[" << i << "]";
      EXPECT_TRUE(std::isfinite(expected));
      nonzero += expected != 0.0f;
    }
    EXPECT_GT(nonzero, 0) << t->name;  // random weights: an all-zero sample means we read the wrong place
  }

  const Checkpoint ckpt = Checkpoint::open(dir);
  EXPECT_EQ(ckpt.files().size(), 1u);
  EXPECT_EQ(ckpt.size(), st.tensors().size());
  ASSERT_NE(ckpt.find("model.embed_tokens.weight"), nullptr);
  EXPECT_EQ(std::memcmp(ckpt.find("model.embed_tokens.weight")->data, embed->data, embed->nbytes), 0);
  const std::vector<std::string> names = ckpt.names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(names.front(), "model.embed_tokens.weight");
}

// --- Writer round trip -------------------------------------------------------------------------------

TEST(Safetensors, RoundTripsEveryDtypeScalarAndEmptyTensor) {
  TempDir dir;
  const fs::path file = dir / "rt.safetensors";
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
  const std::vector<uint16_t> bf16 = {f32_to_bf16(1.0f), f32_to_bf16(-3.5f), f32_to_bf16(100.0f)};
  const std::vector<uint16_t> f16 = {f32_to_f16(0.5f), f32_to_f16(-0.25f), f32_to_f16(2.0f), f32_to_f16(65504.0f)};
  const std::vector<uint8_t> f8 = {0x00, 0x38, 0xb8, 0x7e, 0x01};  // odd length: exercises layout alignment
  const int32_t scalar = -123456;
  const std::vector<int32_t> i32 = {7, -8, 9};
  const std::vector<TensorToWrite> tensors = {
      {"w.f32", DType::kF32, {2, 3}, f32.data(), f32.size() * 4},
      {"w.bf16", DType::kBF16, {3}, bf16.data(), bf16.size() * 2},
      {"w.f16", DType::kF16, {2, 1, 2}, f16.data(), f16.size() * 2},
      {"w.f8", DType::kF8E4M3, {5}, f8.data(), f8.size()},
      {"scalar", DType::kI32, {}, &scalar, 4},
      {"i32", DType::kI32, {3}, i32.data(), 12},
      {"empty", DType::kF32, {0, 4}, nullptr, 0},
  };
  const StringMap metadata = {{"format", "pt"}, {"note", "tide round trip"}};
  write_safetensors(file, tensors, metadata);
  EXPECT_FALSE(fs::exists(file.string() + ".tmp"));

  const SafetensorsFile st = SafetensorsFile::open(file);
  EXPECT_EQ(st.metadata(), metadata);
  ASSERT_EQ(st.tensors().size(), tensors.size());
  const std::string raw = read_all(file);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(raw[static_cast<size_t>(i)]);
  EXPECT_EQ(header_len % 8, 0u);                                       // padded like HF
  EXPECT_EQ(raw.substr(8, header_len).find('\0'), std::string::npos);  // padding is spaces
  const auto header = nlohmann::json::parse(raw.substr(8, header_len));
  for (const TensorToWrite& w : tensors) {
    const TensorInfo* r = st.find(w.name);
    ASSERT_NE(r, nullptr) << w.name;
    EXPECT_EQ(r->dtype, w.dtype) << w.name;
    EXPECT_EQ(r->shape, w.shape) << w.name;
    ASSERT_EQ(r->nbytes, w.nbytes) << w.name;
    if (w.nbytes > 0) {
      EXPECT_EQ(std::memcmp(r->data, w.data, w.nbytes), 0) << w.name;
      // Naturally aligned within the 8-aligned data region (a writer property; readers must not rely on it).
      EXPECT_EQ(header[w.name]["data_offsets"][0].get<uint64_t>() % dtype_size(w.dtype), 0u) << w.name;
    }
  }
  EXPECT_EQ(st.find("scalar")->numel(), 1);
  EXPECT_EQ(st.find("empty")->numel(), 0);

  // Deterministic: the input order does not change the bytes.
  std::vector<TensorToWrite> reversed(tensors.rbegin(), tensors.rend());
  const fs::path file2 = dir / "rt2.safetensors";
  write_safetensors(file2, reversed, metadata);
  EXPECT_EQ(read_all(file2), raw);

  // Moving keeps the mapping and the tensor pointers alive.
  SafetensorsFile a = SafetensorsFile::open(file);
  const TensorInfo* f32_info = a.find("w.f32");
  SafetensorsFile b = std::move(a);
  EXPECT_EQ(b.find("w.f32"), f32_info);
  EXPECT_EQ(std::memcmp(f32_info->data, f32.data(), 24), 0);
}

TEST(Safetensors, WriterRejectsBadTensors) {
  TempDir dir;
  const fs::path file = dir / "w.safetensors";
  const float x[2] = {1, 2};
  const std::vector<TensorToWrite> dup = {{"a", DType::kF32, {2}, x, 8}, {"a", DType::kF32, {1}, x, 4}};
  expect_error([&] { write_safetensors(file, dup); }, {file.string(), "'a'", "twice"});
  const std::vector<TensorToWrite> size = {{"b", DType::kF32, {3}, x, 8}};
  expect_error([&] { write_safetensors(file, size); }, {file.string(), "'b'"});
  const std::vector<TensorToWrite> neg = {{"c", DType::kF32, {-1}, x, 0}};
  expect_error([&] { write_safetensors(file, neg); }, {file.string(), "'c'", "negative"});
  const std::vector<TensorToWrite> reserved = {{"__metadata__", DType::kF32, {2}, x, 8}};
  expect_error([&] { write_safetensors(file, reserved); }, {file.string(), "reserved"});
  EXPECT_FALSE(fs::exists(file));
  EXPECT_FALSE(fs::exists(file.string() + ".tmp"));
}

// --- Sharded checkpoints -----------------------------------------------------------------------------

void write_shard(const fs::path& path, const std::vector<std::string>& names, float value) {
  const std::vector<float> data = {value, value + 1};
  std::vector<TensorToWrite> tensors;
  for (const std::string& n : names) tensors.push_back({n, DType::kF32, {2}, data.data(), 8});
  write_safetensors(path, tensors);
}

void write_index(const fs::path& dir, const nlohmann::json& weight_map) {
  write_all(dir / "model.safetensors.index.json",
            nlohmann::json{{"metadata", {{"total_size", 32}}}, {"weight_map", weight_map}}.dump());
}

TEST(CheckpointFolder, OpensShardedCheckpoint) {
  TempDir dir;
  const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
  write_shard(dir / s1, {"a.weight", "b.weight"}, 1.0f);
  write_shard(dir / s2, {"c.weight", "d.weight"}, 10.0f);
  write_index(dir.path(), {{"a.weight", s1}, {"b.weight", s1}, {"c.weight", s2}, {"d.weight", s2}});
  const Checkpoint ckpt = Checkpoint::open(dir.path());
  EXPECT_EQ(ckpt.files().size(), 2u);
  EXPECT_EQ(ckpt.names(), (std::vector<std::string>{"a.weight", "b.weight", "c.weight", "d.weight"}));
  for (const auto& [name, shard, first] : {std::tuple{"a.weight", s1, 1.0f}, std::tuple{"b.weight", s1, 1.0f},
                                           std::tuple{"c.weight", s2, 10.0f}, std::tuple{"d.weight", s2, 10.0f}}) {
    const TensorInfo* t = ckpt.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->file, (dir / shard).string());
    float v;
    std::memcpy(&v, t->data, 4);
    EXPECT_EQ(v, first) << name;
  }
  EXPECT_EQ(ckpt.find("e.weight"), nullptr);
  expect_error([&] { ckpt.require("e.weight"); }, {"'e.weight'", dir.path().string()});
}

TEST(CheckpointFolder, RejectsBadIndexes) {
  const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
  {  // weight_map names a tensor its shard lacks
    TempDir dir;
    write_shard(dir / s1, {"a.weight"}, 1.0f);
    write_index(dir.path(), {{"a.weight", s1}, {"ghost.weight", s1}});
    expect_error([&] { Checkpoint::open(dir.path()); }, {"'ghost.weight'", (dir / s1).string()});
  }
  {  // missing shard file
    TempDir dir;
    write_shard(dir / s1, {"a.weight"}, 1.0f);
    write_index(dir.path(), {{"a.weight", s1}, {"b.weight", s2}});
    expect_error([&] { Checkpoint::open(dir.path()); }, {(dir / s2).string(), "'b.weight'", "does not exist"});
  }
  for (const std::string bad : {"../escape.safetensors", "/etc/passwd", "sub/x.safetensors", "..", ""}) {
    TempDir dir;
    write_index(dir.path(), {{"a.weight", bad}});
    expect_error([&] { Checkpoint::open(dir.path()); },
                 {"'a.weight'", "'" + bad + "'", "model.safetensors.index.json"});
  }
  {  // a tensor in two shards
    TempDir dir;
    write_shard(dir / s1, {"a.weight", "b.weight"}, 1.0f);
    write_shard(dir / s2, {"b.weight"}, 2.0f);
    write_index(dir.path(), {{"a.weight", s1}, {"b.weight", s2}});
    expect_error([&] { Checkpoint::open(dir.path()); }, {"'b.weight'", (dir / s1).string(), (dir / s2).string()});
  }
  {  // index not JSON, weight_map not an object
    TempDir dir;
    write_all(dir / "model.safetensors.index.json", "{\"weight_map\": ");
    expect_error([&] { Checkpoint::open(dir.path()); }, {"model.safetensors.index.json", "JSON"});
    write_all(dir / "model.safetensors.index.json", "{\"weight_map\": [1]}");
    expect_error([&] { Checkpoint::open(dir.path()); }, {"model.safetensors.index.json", "weight_map"});
  }
  {  // neither file
    TempDir dir;
    expect_error([&] { Checkpoint::open(dir.path()); },
                 {dir.path().string(), "model.safetensors", "model.safetensors.index.json"});
  }
}

// --- Malformed single files --------------------------------------------------------------------------

TEST(SafetensorsMalformed, TooShortOrBadLength) {
  expect_bad_file("", {"too short"});
  expect_bad_file("1234567", {"too short"});
  expect_bad_file(le64(1000) + "{}", {"header length 1000"});
  expect_bad_file(le64(uint64_t{1} << 63) + "{}", {"header length 9223372036854775808"});
  expect_bad_file(le64(200u << 20) + "{}", {"header length"});
  // A header over the 100 MiB limit is refused before parsing, even when the file is big enough to hold it
  // (a sparse file: no real disk use).
  TempDir dir;
  const fs::path file = dir / "huge.safetensors";
  write_all(file, le64(kMaxSafetensorsHeaderBytes + 1) + "{}");
  fs::resize_file(file, kMaxSafetensorsHeaderBytes + 64);
  expect_error([&] { SafetensorsFile::open(file); }, {file.string(), "limit"});
}

TEST(SafetensorsMalformed, HeaderNotJsonObject) {
  expect_bad_file(raw_file("{\"a\": {\"dtype\": ", 0), {"not valid JSON"});
  expect_bad_file(raw_file("\xff\xfe", 0), {"not valid JSON"});
  expect_bad_file(raw_file("[1, 2, 3]", 0), {"array"});
  expect_bad_file(raw_file("{\"t\": 5}", 0), {"'t'", "object"});
  expect_bad_file(raw_file(R"({"__metadata__": {"k": 1}})", 0), {"__metadata__", "'k'"});
  expect_bad_file(raw_file(R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                               "t": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                           8),
                  {"'t'", "twice"});
}

TEST(SafetensorsMalformed, DeeplyNestedHeaderDoesNotOverflowTheStack) {
  constexpr size_t kDepth = 200'000;  // far beyond what a recursive parser survives on an 8 MiB stack
  expect_bad_file(raw_file("{\"w.deep\": " + std::string(kDepth, '[') + std::string(kDepth, ']') + "}", 0),
                  {"'w.deep'", "array"});
  expect_bad_file(raw_file(std::string(kDepth, '['), 0), {"not valid JSON"});
}

TEST(SafetensorsMalformed, BadEntries) {
  expect_bad_file(raw_file(R"({"w.missing": {"shape": [1], "data_offsets": [0, 4]}})", 4), {"'w.missing'", "dtype"});
  expect_bad_file(raw_file(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", 4), {"'w'", "shape"});
  expect_bad_file(raw_file(R"({"w": {"dtype": 3, "shape": [1], "data_offsets": [0, 4]}})", 4), {"'w'", "dtype"});
  expect_bad_file(raw_file(R"({"w.f4": {"dtype": "F4", "shape": [1], "data_offsets": [0, 1]}})", 1),
                  {"'w.f4'", "'F4'"});
  expect_bad_file(raw_file(R"({"w.neg": {"dtype": "F32", "shape": [-2, 3], "data_offsets": [0, 4]}})", 4),
                  {"'w.neg'", "negative dimension -2"});
  expect_bad_file(raw_file(R"({"w.frac": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 4), {"'w.frac'"});
  expect_bad_file(raw_file(R"({"w.size": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 10]}})", 10),
                  {"'w.size'", "needs 12 bytes"});
  expect_bad_file(
      raw_file(R"({"w.huge": {"dtype": "F32", "shape": [4611686018427387904, 8], "data_offsets": [0, 0]}})", 0),
      {"'w.huge'", "2^64"});
  expect_bad_file(raw_file(R"({"w.rev": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8),
                  {"'w.rev'", "begin > end"});
  expect_bad_file(raw_file(R"({"w.past": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8),
                  {"'w.past'", "past"});
  expect_bad_file(raw_file(R"({"w.float": {"dtype": "F32", "shape": [1], "data_offsets": [0.0, 4.0]}})", 4),
                  {"'w.float'", "data_offsets"});
  expect_bad_file(raw_file(R"({"w.str": {"dtype": "F32", "shape": [1], "data_offsets": ["0", "4"]}})", 4),
                  {"'w.str'", "data_offsets"});
  expect_bad_file(raw_file(R"({"w.one": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4),
                  {"'w.one'", "data_offsets"});
  expect_bad_file(raw_file(R"({"w.negoff": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 4),
                  {"'w.negoff'", "data_offsets"});
}

TEST(SafetensorsMalformed, OverlappingTensors) {
  expect_bad_file(raw_file(R"({"w.a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                               "w.b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                           12),
                  {"'w.a'", "'w.b'", "overlap"});
  // Sharing bytes exactly is an overlap too; an empty tensor inside another is not.
  expect_bad_file(raw_file(R"({"w.a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                               "w.c": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})",
                           8),
                  {"'w.a'", "'w.c'", "overlap"});
  TempDir dir;
  write_all(dir / "ok.safetensors", raw_file(R"({"w.a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                                 "w.e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]}})",
                                             8));
  EXPECT_EQ(SafetensorsFile::open(dir / "ok.safetensors").tensors().size(), 2u);
}

TEST(SafetensorsMalformed, TruncatedFile) {
  TempDir dir;
  const fs::path file = dir / "cut.safetensors";
  const std::vector<float> data(16, 1.0f);
  const std::vector<TensorToWrite> tensors = {{"w.first", DType::kF32, {8}, data.data(), 32},
                                              {"w.second", DType::kF32, {8}, data.data() + 8, 32}};
  write_safetensors(file, tensors);
  ASSERT_NO_THROW(SafetensorsFile::open(file));
  fs::resize_file(file, fs::file_size(file) - 3);
  expect_error([&] { SafetensorsFile::open(file); }, {file.string(), "'w.second'", "truncated"});
}

TEST(SafetensorsMalformed, NotARegularFile) {
  TempDir dir;
  expect_error([&] { SafetensorsFile::open(dir.path()); }, {dir.path().string(), "regular"});
  expect_error([&] { SafetensorsFile::open(dir / "absent.safetensors"); }, {"absent.safetensors", "cannot open"});
}

}  // namespace
}  // namespace tide
