// tide_bench: the GPU benchmark of tide on a synthetic model (random bf16 weights made on the GPU, no
// checkpoint; --fp8: FP8 linear layers). One run measures the ceilings (copy and read bandwidth, bf16 and FP8
// GEMM), the linear layers at decode batch sizes, decode over a paged KV cache,
// chunked prefill, the attention kernel alone and the sample op (--sections picks some); it prints a table
// as it goes, then one JSON object (also written to --out). Progress goes to stderr. Reports figures; never
// passes or fails.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "bench/bench_util.h"
#include "bench/sections.h"
#include "bench/synthetic_model.h"
#include "core/error.h"

namespace tide::bench {
namespace {

struct Flags {
  std::string synthetic;
  std::optional<int64_t> num_layers;
  std::string out;
  std::vector<std::string> attention_decode;  // SEQS:CONTEXT
  BenchOptions options;
};

// "SEQS:CONTEXT" as a pair of positive counts.
std::pair<int64_t, int64_t> decode_point_arg(const std::string& text) {
  const size_t colon = text.find(':');
  size_t used_seqs = 0, used_context = 0;
  int64_t seqs = 0, context = 0;
  try {
    if (colon != std::string::npos) {
      seqs = std::stoll(text.substr(0, colon), &used_seqs);
      context = std::stoll(text.substr(colon + 1), &used_context);
    }
  } catch (const std::exception&) {
    seqs = 0;
  }
  if (colon == std::string::npos || used_seqs != colon || used_context != text.size() - colon - 1 || seqs <= 0 ||
      context <= 0) {
    fail("--attention-decode: '{}' is not SEQS:CONTEXT with two positive counts", text);
  }
  return {seqs, context};
}

nlohmann::json device_json() {
  int device = 0;
  cudaDeviceProp prop{};
  TIDE_CUDA_CHECK(cudaGetDevice(&device));
  TIDE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int driver = 0, runtime = 0;
  TIDE_CUDA_CHECK(cudaDriverGetVersion(&driver));
  TIDE_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  return {{"name", prop.name}, {"sm", fmt::format("{}.{}", prop.major, prop.minor)},
          {"multiprocessors", prop.multiProcessorCount}, {"memory_bytes", prop.totalGlobalMem},
          {"driver_version", driver}, {"runtime_version", runtime}};
}

nlohmann::json config_json(const ModelConfig& c, bool fp8) {
  return {{"hidden_size", c.hidden_size}, {"num_layers", c.num_layers}, {"num_heads", c.num_heads},
          {"num_heads_kv", c.num_heads_kv}, {"head_dim", c.head_dim}, {"intermediate_size", c.intermediate_size},
          {"vocab_size", c.vocab_size}, {"num_groups", c.groups.size()}, {"weight_bytes", weight_bytes(c, fp8)},
          {"linear_params", linear_params(c)}};
}

// Runs `section`, logging its wall time to stderr.
template <typename Section>
void timed_section(const char* name, Section&& section) {
  const auto begin = std::chrono::steady_clock::now();
  std::cerr << "tide_bench: " << name << " ...\n";
  section();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  std::cerr << fmt::format("tide_bench: {} done in {:.1f} s\n", name, s);
}

int run(Flags flags) {
  const auto begin = std::chrono::steady_clock::now();
  if (!flags.attention_decode.empty()) {
    flags.options.attention_decode.clear();
    for (const std::string& point : flags.attention_decode) flags.options.attention_decode.push_back(decode_point_arg(point));
  }
  const ModelConfig config =
      ModelConfig::from_json(synthetic_config_json(flags.synthetic, flags.num_layers), "--synthetic " + flags.synthetic);
  if (!CudaBackend::available()) fail("no CUDA device is available");

  // Checked before any GPU time is spent: Command-A in bf16 needs --num-layers to fit one GPU.
  // FP8 weights are made in bf16 one matrix at a time (the largest is gate_up) and quantized.
  const int64_t needed = weight_bytes(config, flags.options.fp8) +
                         (flags.options.fp8 ? 4 * config.intermediate_size * config.hidden_size : 0);
  if (needed + kMemoryMargin > free_device_bytes()) {
    fail("the synthetic weights ({:.1f} GiB) do not fit in free GPU memory ({:.1f} GiB, 4 GiB margin); "
         "try --num-layers", static_cast<double>(needed) / kGiB, static_cast<double>(free_device_bytes()) / kGiB);
  }

  Report report(stdout);
  report.header() = {{"benchmark", "tide_bench"}, {"model", flags.synthetic}, {"quick", flags.options.quick},
                     {"fp8", flags.options.fp8},
                     {"fp8_kv", flags.options.fp8_kv},
                     {"device", device_json()}, {"config", config_json(config, flags.options.fp8)}};
  report.print_table_header();
  if (flags.options.runs("ceilings")) timed_section("ceilings", [&] { run_ceilings(flags.options, report); });
  if (flags.options.runs("linear") || flags.options.runs("decode") || flags.options.runs("prefill")) {
    // The weights live on their own backend until prefill is done; each section brings its own for the rest.
    CudaBackend weights_backend;
    Cohere2Weights weights;
    timed_section("synthetic weights",
                  [&] { weights = synthetic_weights(config, weights_backend, flags.options.fp8); });
    const BenchModel model{config, weights};
    if (flags.options.runs("linear")) timed_section("linear", [&] { run_linear(model, flags.options, report); });
    if (flags.options.runs("decode")) timed_section("decode", [&] { run_decode(model, flags.options, report); });
    if (flags.options.runs("prefill")) timed_section("prefill", [&] { run_prefill(model, flags.options, report); });
  }
  if (flags.options.runs("attention")) timed_section("attention", [&] { run_attention(flags.options, report); });
  if (flags.options.runs("sampling")) timed_section("sampling", [&] { run_sampling(flags.options, report); });

  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  report.header()["wall_seconds"] = total_s;
  const std::string json = report.to_json().dump();
  fmt::print("{}\n", json);
  std::fflush(stdout);
  if (!flags.out.empty()) {
    std::ofstream out(flags.out);
    if (!out || !(out << report.to_json().dump(2) << "\n")) fail("--out: cannot write {}", flags.out);
  }
  return 0;
}

}  // namespace
}  // namespace tide::bench

int main(int argc, char** argv) {
  tide::bench::Flags flags;
  CLI::App app{"tide_bench: GPU benchmark of tide on a synthetic model (decode, prefill, attention, ceilings)",
               "tide_bench"};
  app.add_option("--synthetic", flags.synthetic, "r7b, command-a, or PATH/config.json")->required();
  app.add_option("--num-layers", flags.num_layers, "override the number of layers (the sliding pattern is kept)");
  app.add_option("--out", flags.out, "also write the JSON object to this file");
  app.add_flag("--quick", flags.options.quick, "fewer repetitions (the R7B run takes a few minutes at most)");
  app.add_flag("--ablate", flags.options.ablate, "decode: time the first point without each op group in turn");
  app.add_option("--trace", flags.options.trace_prefix,
                 "decode: also write a CUPTI kernel timeline of each point to PREFIX-B<batch>-C<context>.csv (verify "
                 "points: ...-k<drafts>.csv); prefill: of one more run of each prompt to PREFIX-prefill-<tokens>.csv");
  app.add_flag("--fp8", flags.options.fp8, "FP8 E4M3 linear weights with row scales (the model's FP8 path)");
  app.add_option("--linear-tokens", flags.options.linear_tokens, "token counts of the linear section")
      ->delimiter(',');
  app.add_flag("--fp8-kv", flags.options.fp8_kv,
               "decode, prefill and attention: an FP8 KV cache (codes and a scale per head's vector)");
  app.add_flag("--fp8-kv-codes", flags.options.fp8_kv_codes,
               "prefill with --fp8-kv: the FP8 attention kernels on the codes, not the blocks dequantized to bf16");
  app.add_option("--fp8-variant", flags.options.fp8_variant,
                 "force this shape of the FP8 small-batch matmul (-1: chosen per matrix)");
  app.add_option("--fp8-wgmma-max-tokens", flags.options.fp8_wgmma_max_tokens,
                 "decode: FP8 matmuls of up to this many tokens run on tide's wgmma kernel, 0 to 256 (-1: the default's tile widths)")
      ->check(CLI::Range(-1, 256));
  app.add_flag("--fp8-exact-accum", flags.options.fp8_exact_accum,
               "decode, linear and prefill: cuBLASLt's FP8 matmuls promote their sums to f32 as they go, "
               "instead of the engine's fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM)");
  app.add_flag_callback(
      "--no-stream-shares", [&flags] { flags.options.fp8_wgmma_stream_shares = false; },
      "decode: every wgmma FP8 matmul takes every SM, not its stream's share while both streams run");
  app.add_option("--bf16-small-max-tokens", flags.options.bf16_small_max_tokens,
                 "decode and prefill: every bf16 matmul of up to this many tokens runs on tide's small-batch "
                 "kernel (-1: the backend's rule, the default; 0: cuBLASLt always)")
      ->check(CLI::Range(int64_t{-1}, int64_t{1} << 20));
  app.add_flag("!--no-baselines", flags.options.baselines,
               "decode: leave out the no-PDL, no-overlap and cuBLASLt points");
  app.add_option("--batches", flags.options.decode_batches, "decode batch sizes")->delimiter(',');
  app.add_option("--verify-tokens", flags.options.verify_tokens,
                 "decode: also speculative decoding's verify steps, each sequence computing 1 + k tokens (a logits "
                 "row each), for each k given")
      ->delimiter(',');
  app.add_option("--contexts", flags.options.decode_contexts, "decode context lengths")->delimiter(',');
  app.add_option("--attention-decode", flags.attention_decode,
                 "attention: decode points as SEQS:CONTEXT (default 8:32768,32:32768)")
      ->delimiter(',');
  app.add_option("--prefill-lengths", flags.options.prefill_lengths, "prefill prompt lengths")->delimiter(',');
  app.add_option("--sections", flags.options.sections,
                 "sections to run: ceilings, linear, decode, prefill, attention, sampling (default all)")
      ->delimiter(',')
      ->check(CLI::IsMember({"ceilings", "linear", "decode", "prefill", "attention", "sampling"}));
  app.add_option("--max-prefill-chunk", flags.options.max_prefill_chunk, "prefill tokens per forward step")
      ->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
    return tide::bench::run(flags);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::cerr << "tide_bench: error: " << e.what() << "\n";
    return 1;
  }
}
