// Other Cohere2 shapes than the fixtures': random checkpoints written here (window smaller than a block,
// a global first layer, other head counts, head_dim and intermediate sizes, F32 and F16 weights), run
// through the engine (paged KV cache, chunked prefill, incremental decode, mixed batches) and compared with
// a dense full-recomputation forward written directly from docs/design/cohere2-numerics.md in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../test_util.h"
#include "backend/cpu/cpu_backend.h"
#include "model/checkpoint.h"
#include "runtime/engine.h"

namespace tide {
namespace {

struct SyntheticSpec {
  std::string name;
  int64_t hidden, heads, heads_kv, inter, vocab, window;
  std::vector<std::string> layer_types;
  DType dtype;
};

void PrintTo(const SyntheticSpec& spec, std::ostream* os) { *os << spec.name; }

struct SyntheticModel {
  SyntheticSpec spec;
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<float>>> tensors;  // values as stored

  const std::vector<float>& w(const std::string& name) const { return tensors.at(name).second; }
};

// Rounds through the storage dtype so the reference sees exactly the stored weights.
float stored(float v, DType dtype) { return dtype == DType::kF16 ? f16_to_f32(f32_to_f16(v)) : v; }

SyntheticModel make_model(const SyntheticSpec& s, uint32_t seed, const std::filesystem::path& dir) {
  SyntheticModel m{s, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  const int64_t d = s.hidden / s.heads;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float mean = 0) {
    int64_t n = 1;
    for (int64_t x : shape) n *= x;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = stored(mean + scale * normal(rng), s.dtype);
    m.tensors[name] = {shape, v};
  };
  add("model.embed_tokens.weight", {s.vocab, s.hidden}, 1.0f);
  add("model.norm.weight", {s.hidden}, 0.1f, 1.0f);
  for (size_t i = 0; i < s.layer_types.size(); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {s.hidden}, 0.1f, 1.0f);
    add(p + "self_attn.q_proj.weight", {s.heads * d, s.hidden}, 0.15f);
    add(p + "self_attn.k_proj.weight", {s.heads_kv * d, s.hidden}, 0.15f);
    add(p + "self_attn.v_proj.weight", {s.heads_kv * d, s.hidden}, 0.15f);
    add(p + "self_attn.o_proj.weight", {s.hidden, s.heads * d}, 0.1f);
    add(p + "mlp.gate_proj.weight", {s.inter, s.hidden}, 0.1f);
    add(p + "mlp.up_proj.weight", {s.inter, s.hidden}, 0.1f);
    add(p + "mlp.down_proj.weight", {s.hidden, s.inter}, 0.1f);
  }

  std::vector<std::vector<uint16_t>> half_storage;
  std::vector<TensorToWrite> out;
  for (const auto& [name, t] : m.tensors) {
    if (s.dtype == DType::kF16) {
      half_storage.emplace_back();
      for (float v : t.second) half_storage.back().push_back(f32_to_f16(v));
      out.push_back({name, s.dtype, t.first, half_storage.back().data(), half_storage.back().size() * 2});
    } else {
      out.push_back({name, s.dtype, t.first, t.second.data(), t.second.size() * 4});
    }
  }
  write_safetensors(dir / "model.safetensors", out);

  nlohmann::json config = {{"architectures", {"Cohere2ForCausalLM"}},
                           {"hidden_size", s.hidden},
                           {"intermediate_size", s.inter},
                           {"num_attention_heads", s.heads},
                           {"num_key_value_heads", s.heads_kv},
                           {"num_hidden_layers", s.layer_types.size()},
                           {"layer_types", s.layer_types},
                           {"sliding_window", s.window},
                           {"vocab_size", s.vocab},
                           {"max_position_embeddings", 4096},
                           {"layer_norm_eps", 1e-5},
                           {"logit_scale", 0.5},
                           {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                           {"bos_token_id", 5},
                           {"eos_token_id", 6}};
  std::ofstream(dir / "config.json") << config.dump(2);
  std::filesystem::copy_file(test::fixture("cohere2-tiny/tokenizer.json"), dir / "tokenizer.json");
  return m;
}

// --- the dense reference: full recomputation, double precision ---

std::vector<double> layer_norm(const std::vector<double>& x, const std::vector<float>& w) {
  const size_t n = w.size();
  std::vector<double> y(x.size());
  for (size_t t = 0; t < x.size() / n; ++t) {
    double mean = 0, var = 0;
    for (size_t i = 0; i < n; ++i) mean += x[t * n + i];
    mean /= double(n);
    for (size_t i = 0; i < n; ++i) var += (x[t * n + i] - mean) * (x[t * n + i] - mean);
    var /= double(n);
    for (size_t i = 0; i < n; ++i) y[t * n + i] = w[i] * (x[t * n + i] - mean) / std::sqrt(var + 1e-5);
  }
  return y;
}

// x: [T, K], w: [N, K] -> [T, N]
std::vector<double> linear(const std::vector<double>& x, const std::vector<float>& w, size_t n) {
  const size_t k = w.size() / n, t_count = x.size() / k;
  std::vector<double> y(t_count * n);
  for (size_t t = 0; t < t_count; ++t)
    for (size_t o = 0; o < n; ++o) {
      double acc = 0;
      for (size_t i = 0; i < k; ++i) acc += x[t * k + i] * w[o * k + i];
      y[t * n + o] = acc;
    }
  return y;
}

void rope(std::vector<double>& x, size_t heads, size_t d, double theta) {
  const size_t width = heads * d;
  for (size_t p = 0; p < x.size() / width; ++p)
    for (size_t h = 0; h < heads; ++h)
      for (size_t j = 0; j < d / 2; ++j) {
        const double a = double(p) / std::pow(theta, 2.0 * double(j) / double(d));
        double& x0 = x[p * width + h * d + 2 * j];
        double& x1 = x[p * width + h * d + 2 * j + 1];
        const double y0 = x0 * std::cos(a) - x1 * std::sin(a), y1 = x1 * std::cos(a) + x0 * std::sin(a);
        x0 = y0;
        x1 = y1;
      }
}

// Logits [T][vocab] of every position of `ids`.
std::vector<std::vector<double>> reference_logits(const SyntheticModel& m, const std::vector<int32_t>& ids) {
  const SyntheticSpec& s = m.spec;
  const size_t T = ids.size(), H = size_t(s.hidden), d = size_t(s.hidden / s.heads);
  const size_t hq = size_t(s.heads), hkv = size_t(s.heads_kv);
  std::vector<double> h(T * H);
  for (size_t t = 0; t < T; ++t)
    for (size_t i = 0; i < H; ++i) h[t * H + i] = m.w("model.embed_tokens.weight")[size_t(ids[t]) * H + i];
  for (size_t l = 0; l < s.layer_types.size(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const bool sliding = s.layer_types[l] == "sliding_attention";
    const auto x = layer_norm(h, m.w(p + "input_layernorm.weight"));
    auto q = linear(x, m.w(p + "self_attn.q_proj.weight"), hq * d);
    auto k = linear(x, m.w(p + "self_attn.k_proj.weight"), hkv * d);
    const auto v = linear(x, m.w(p + "self_attn.v_proj.weight"), hkv * d);
    if (sliding) {
      rope(q, hq, d, 10000.0);
      rope(k, hkv, d, 10000.0);
    }
    std::vector<double> a(T * hq * d, 0.0);
    for (size_t t = 0; t < T; ++t)
      for (size_t head = 0; head < hq; ++head) {
        const size_t kvh = head / (hq / hkv);
        const size_t lo = sliding && t + 1 > size_t(s.window) ? t + 1 - size_t(s.window) : 0;
        std::vector<double> w;
        double mx = -INFINITY;
        for (size_t j = lo; j <= t; ++j) {
          double dot = 0;
          for (size_t i = 0; i < d; ++i) dot += q[t * hq * d + head * d + i] * k[j * hkv * d + kvh * d + i];
          w.push_back(dot / std::sqrt(double(d)));
          mx = std::max(mx, w.back());
        }
        double sum = 0;
        for (double& e : w) sum += (e = std::exp(e - mx));
        for (size_t j = lo; j <= t; ++j)
          for (size_t i = 0; i < d; ++i) a[t * hq * d + head * d + i] += w[j - lo] / sum * v[j * hkv * d + kvh * d + i];
      }
    const auto o = linear(a, m.w(p + "self_attn.o_proj.weight"), H);
    auto gate = linear(x, m.w(p + "mlp.gate_proj.weight"), size_t(s.inter));
    const auto up = linear(x, m.w(p + "mlp.up_proj.weight"), size_t(s.inter));
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    const auto mlp = linear(gate, m.w(p + "mlp.down_proj.weight"), H);
    for (size_t i = 0; i < h.size(); ++i) h[i] = (h[i] + o[i]) + mlp[i];
  }
  const auto y = layer_norm(h, m.w("model.norm.weight"));
  const auto logits = linear(y, m.w("model.embed_tokens.weight"), size_t(s.vocab));
  std::vector<std::vector<double>> out(T);
  for (size_t t = 0; t < T; ++t)
    for (size_t i = 0; i < size_t(s.vocab); ++i) out[t].push_back(0.5 * logits[t * size_t(s.vocab) + i]);
  return out;
}

double rel_err(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

std::vector<int32_t> random_ids(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = dist(rng);
  return ids;
}

class SyntheticModelTest : public ::testing::TestWithParam<SyntheticSpec> {};

TEST_P(SyntheticModelTest, PagedChunkedForwardMatchesDenseReference) {
  test::TempDir dir;
  const SyntheticModel m = make_model(GetParam(), 11, dir.path());
  const std::vector<int32_t> prompt = random_ids(45, m.spec.vocab, 12);
  const auto want = reference_logits(m, prompt);
  for (auto [block, chunk] : {std::pair<int64_t, int64_t>{3, 5}, {8, 45}, {32, 16}}) {
    EngineOptions options;
    options.block_size = block;
    options.max_prefill_chunk = chunk;
    options.kv_cache_memory = 8 << 20;
    Engine engine(dir.path(), std::make_unique<CpuBackend>(), options);
    const auto got = engine.prompt_logits(prompt, true);
    for (size_t p = 0; p < prompt.size(); ++p) {
      EXPECT_LT(rel_err(got[p], want[p]), 1e-4) << "block " << block << " chunk " << chunk << " pos " << p;
    }
  }
}

TEST_P(SyntheticModelTest, IncrementalDecodeMatchesFullRecomputation) {
  test::TempDir dir;
  const SyntheticModel m = make_model(GetParam(), 21, dir.path());
  std::vector<int32_t> ids = random_ids(9, m.spec.vocab, 22);
  EngineOptions options;
  options.block_size = 4;
  options.kv_cache_memory = 8 << 20;
  Engine engine(dir.path(), std::make_unique<CpuBackend>(), options);
  GenerateOptions gen;
  gen.max_tokens = 30;
  gen.ignore_eos = true;
  const GenerateResult got = engine.generate(ids, gen);
  for (int32_t next : got.ids) {
    const auto logits = reference_logits(m, ids).back();
    const int32_t want = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    ASSERT_EQ(next, want) << "after " << ids.size() << " tokens";
    ids.push_back(next);
  }
}

TEST_P(SyntheticModelTest, MixedBatchEqualsSequencesAlone) {
  // One forward with a prefill chunk (with a cached prefix), a decode token and a fresh prompt gives each
  // sequence the logits it gets alone.
  test::TempDir dir;
  const SyntheticModel m = make_model(GetParam(), 31, dir.path());
  CpuBackend backend;
  const Cohere2Model model = Cohere2Model::load(dir.path(), backend);
  const int64_t block = 4;
  const int num_groups = static_cast<int>(model.config().groups.size());
  KvCacheManager kv(block, std::vector<int64_t>(static_cast<size_t>(num_groups), 0), KvArenaSpec{200 * num_groups, 0},
                    false);
  std::vector<KvStorage> storage = model.allocate_kv(block, 200 * num_groups);

  const std::vector<std::vector<int32_t>> prompts = {random_ids(30, m.spec.vocab, 1), random_ids(21, m.spec.vocab, 2),
                                                     random_ids(13, m.spec.vocab, 3)};
  const std::vector<int64_t> cached = {17, 20, 0};  // positions computed before the mixed step
  std::vector<SequenceKv> seqs;
  for (size_t s = 0; s < prompts.size(); ++s) {
    seqs.emplace_back();
    kv.append(seqs[s], static_cast<int64_t>(prompts[s].size()));
    if (cached[s] == 0) continue;
    ForwardBatch warm;
    warm.token_ids.assign(prompts[s].begin(), prompts[s].begin() + cached[s]);
    warm.seqs.push_back({0, cached[s], {}});
    for (auto& t : seqs[s].block_tables) warm.seqs.back().block_tables.emplace_back(t);
    model.forward(warm, storage);
  }
  ForwardBatch batch;
  for (size_t s = 0; s < prompts.size(); ++s) {
    batch.token_ids.insert(batch.token_ids.end(), prompts[s].begin() + cached[s], prompts[s].end());
    batch.seqs.push_back({cached[s], static_cast<int64_t>(prompts[s].size()) - cached[s], {}});
    for (auto& t : seqs[s].block_tables) batch.seqs.back().block_tables.emplace_back(t);
    batch.logit_indices.push_back(static_cast<int32_t>(batch.token_ids.size()) - 1);
  }
  const Tensor logits = model.forward(batch, storage);
  for (size_t s = 0; s < prompts.size(); ++s) {
    const auto want = reference_logits(m, prompts[s]).back();
    const std::vector<float> got(logits.as<float>() + s * m.spec.vocab, logits.as<float>() + (s + 1) * m.spec.vocab);
    EXPECT_LT(rel_err(got, want), 1e-4) << "sequence " << s;
  }

  // Then a decode-only step of the three: forward pads it to a graph's batch of 4 (a padding row with a null
  // block table, which attention must skip).
  ForwardBatch decode;
  std::vector<std::vector<int32_t>> texts = prompts;
  for (size_t s = 0; s < prompts.size(); ++s) {
    const int32_t token = static_cast<int32_t>(s + 1);
    texts[s].push_back(token);
    kv.append(seqs[s], 1);
    decode.token_ids.push_back(token);
    decode.seqs.push_back({static_cast<int64_t>(prompts[s].size()), 1, {}});
    for (auto& t : seqs[s].block_tables) decode.seqs.back().block_tables.emplace_back(t);
    decode.logit_indices.push_back(static_cast<int32_t>(s));
  }
  const Tensor next = model.forward(decode, storage);
  for (size_t s = 0; s < prompts.size(); ++s) {
    const auto want = reference_logits(m, texts[s]).back();
    const std::vector<float> got(next.as<float>() + s * m.spec.vocab, next.as<float>() + (s + 1) * m.spec.vocab);
    EXPECT_LT(rel_err(got, want), 1e-4) << "decode, sequence " << s;
  }
}

const std::vector<std::string> kSSG = {"sliding_attention", "sliding_attention", "full_attention"};

INSTANTIATE_TEST_SUITE_P(
    Shapes, SyntheticModelTest,
    ::testing::Values(
        // window smaller than every block size used, global last layer, F32 weights
        SyntheticSpec{"WindowBelowEveryBlock", 64, 4, 2, 96, 300, 2, kSSG, DType::kF32},
        // global first layer, multi-query (1 KV head), head_dim 8, F16 weights
        SyntheticSpec{"GlobalFirstMultiQueryF16", 48, 6, 1, 80, 257, 7,
                      {"full_attention", "sliding_attention", "sliding_attention"}, DType::kF16},
        // no global layer at all, head_dim 64, window larger than the prompt
        SyntheticSpec{"AllSlidingHeadDim64", 128, 2, 2, 64, 200, 100, {"sliding_attention", "sliding_attention"},
                      DType::kF32}),
    [](const ::testing::TestParamInfo<SyntheticSpec>& info) { return info.param.name; });

}  // namespace
}  // namespace tide
