#include "apps/tide/cli_util.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cctype>
#include <cmath>
#include <iostream>
#include <optional>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/cpu/cpu_backend.h"
#ifdef TIDE_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif
#include "core/comma_list.h"
#include "core/error.h"

namespace tide::cli {

std::vector<int32_t> parse_ids(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  for (const std::string& item : split_comma_list(text)) {
    int32_t id = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || id < 0) {
      fail("{}: '{}' is not a token id (expected non-negative integers separated by commas)", flag, item);
    }
    ids.push_back(id);
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

void note_stand_in_tokenizer(const Tokenizer& tokenizer, const std::string& model) {
  if (!tokenizer.is_stand_in()) return;
  std::cerr << "tide: " << model << " has no tokenizer files: using a stand-in tokenizer of " << tokenizer.vocab_size()
            << " ids (ids 0-255 are bytes, id N >= 256 is the text \"<tok_N>\")" << std::endl;
}

namespace {

std::optional<int64_t> parse_integer(const std::string& text) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// "a positive integer", "an integer ≥ 0", "an integer in [1, 64]".
std::string integer_range(int64_t min, int64_t max) {
  if (max == INT64_MAX) return min == 1 ? "a positive integer" : fmt::format("an integer ≥ {}", min);
  return fmt::format("an integer in [{}, {}]", min, max);
}

}  // namespace

CLI::Validator integer_in(int64_t min, int64_t max) {
  return CLI::Validator(
      [min, max](std::string& input) -> std::string {
        const std::optional<int64_t> v = parse_integer(input);
        if (v && *v >= min && *v <= max) return "";
        return fmt::format("must be {}, got {}", integer_range(min, max), input.empty() ? "nothing" : input);
      },
      max == INT64_MAX ? fmt::format("INT ≥ {}", min) : fmt::format("INT in [{}, {}]", min, max));
}

CLI::Validator power_of_two_at_most(int64_t max) {
  return CLI::Validator(
      [max](std::string& input) -> std::string {
        const std::optional<int64_t> v = parse_integer(input);
        if (v && *v >= 1 && *v <= max && std::has_single_bit(static_cast<uint64_t>(*v))) return "";
        return fmt::format("must be a positive power of two ≤ {}, got {}", max, input.empty() ? "nothing" : input);
      },
      fmt::format("POWER OF 2 ≤ {}", max));
}

CLI::Validator number_in(double min, double max, bool min_exclusive) {
  const std::string range = fmt::format("{}{:g}, {:g}]", min_exclusive ? "(" : "[", min, max);
  const char* bound = min_exclusive ? ">" : "≥";  // of a range without an upper end
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        double v = 0;
        const auto [end, ec] = std::from_chars(input.data(), input.data() + input.size(), v);
        const bool number = !input.empty() && ec == std::errc() && end == input.data() + input.size();
        if (number && std::isfinite(v) && (min_exclusive ? v > min : v >= min) && v <= max) return "";
        if (max == INFINITY) return fmt::format("must be a finite number {} {:g}, got {}", bound, min, input.empty() ? "nothing" : input);
        return fmt::format("must be a finite number in {}, got {}", range, input.empty() ? "nothing" : input);
      },
      max == INFINITY ? fmt::format("NUMBER {} {:g}", bound, min) : "NUMBER in " + range);
}

CLI::Validator one_of(std::vector<std::string> values) {
  const std::string list = fmt::format("{}", fmt::join(values, ", "));
  return CLI::Validator(
      [values, list](std::string& input) -> std::string {
        if (std::find(values.begin(), values.end(), input) != values.end()) return "";
        return fmt::format("must be {}{}, got '{}'", values.size() > 1 ? "one of " : "", list, input);
      },
      "{" + list + "}");
}

CLI::Validator not_empty(std::string hint) {
  return CLI::Validator([hint](std::string& input) -> std::string { return input.empty() ? "is empty: " + hint : ""; },
                        "");
}

CLI::Validator byte_size(int64_t min) {
  return CLI::Validator(
      [min](std::string& input) -> std::string {
        const std::string given = input;
        std::string converted = input;
        std::string error;
        try {
          error = CLI::AsSizeValue(false)(converted);
        } catch (const CLI::Error& e) {
          error = e.what();
        }
        const std::optional<int64_t> v = error.empty() ? parse_integer(converted) : std::nullopt;
        if (v && *v >= min) {
          input = converted;
          return "";
        }
        return fmt::format("must be a number of bytes ≥ {} (plain, or with a unit: 512MiB, 2GB, 1TiB), got {}", min,
                           given.empty() ? "nothing" : given);
      },
      "SIZE");
}

void add_engine_flags(CLI::App* cmd, EngineFlags& flags) {
  EngineOptions& o = flags.options;
  cmd->add_option("--device", flags.device, "Where to run: cpu, cuda, or auto (cuda when a GPU is present)")
      ->capture_default_str()
      ->check(one_of({"cpu", "cuda", "auto"}));
  cmd->add_option("--block-size", o.block_size, "Positions per KV cache block")
      ->capture_default_str()
      ->check(power_of_two_at_most(kMaxBlockSizeFlag));
  cmd->add_option("--kv-cache-memory", o.kv_cache_memory,
                  "Bytes for the KV cache pools (suffixes like 512MiB, 2GB accepted); 0: automatic (on a GPU "
                  "what --gpu-memory-utilization leaves after the weights, on the CPU 256MiB)")
      ->capture_default_str()
      ->transform(byte_size(0));
  cmd->add_option("--host-kv-cache-memory", o.host_kv_cache_memory,
                  "Bytes of host memory that blocks evicted from the KV cache are kept in (0: none)")
      ->capture_default_str()
      ->transform(byte_size(0));
  cmd->add_option("--gpu-memory-utilization", o.gpu_memory_utilization,
                  "Fraction of the GPU's memory tide may use (weights, activations, KV cache) with an automatic "
                  "--kv-cache-memory")
      ->capture_default_str()
      ->check(number_in(0.01, 1.0));
  cmd->add_flag("--no-prefix-caching", flags.no_prefix_caching, "Never reuse KV blocks across requests");
  cmd->add_flag("--enforce-eager", o.enforce_eager,
                "Run every decode step op by op instead of replaying recorded CUDA graphs");
  cmd->add_option("--quantization", flags.quantization,
                  "fp8: quantize the linear layers to FP8 E4M3 at load (one scale per weight row, activations per "
                  "token); FP8 checkpoints are read as FP8 without it")
      ->check(one_of({"fp8"}));
  cmd->add_option("--load-format", flags.load_format,
                  "auto: the folder's safetensors checkpoint; dummy: random weights made on the device from "
                  "config.json alone (no checkpoint read), to serve or benchmark a model's shape; with "
                  "--quantization fp8 they are quantized like real weights")
      ->check(one_of({"auto", "dummy"}));
  cmd->add_option("--kv-cache-dtype", flags.kv_cache_dtype,
                  "auto: the KV cache in the activation dtype; fp8 (fp8_e4m3): E4M3 codes with one scale per "
                  "head's key or value vector, about half the bytes (CUDA: head_dim 64, 128 or 256)")
      ->check(one_of({"auto", "fp8", "fp8_e4m3"}));
  cmd->add_option("--speculative-config", flags.speculative_config,
                  "Speculative decoding as vLLM takes it, a JSON object: {\"method\": \"ngram\", "
                  "\"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2} drafts up "
                  "to 4 tokens per step from the request's own prompt and output (prompt lookup) and verifies them in "
                  "the same forward pass; {\"model\": \"DIR\", \"num_speculative_tokens\": 4} drafts with a "
                  "smaller model of the same vocabulary (loaded like the model, its KV cache a share of the "
                  "model's); \"disable_by_batch_size\": N with either: a step speculates only while fewer than N "
                  "requests run; outputs are the same as without it")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            try {
              spec::SpeculativeConfig::parse(value);
              return {};
            } catch (const std::exception& e) {
              return fmt::format("is not a speculative decoding configuration: {}", e.what());
            }
          },
          "JSON"));
  cmd->add_option("--max-num-seqs", o.max_num_seqs, "Requests running at once")
      ->capture_default_str()
      ->check(integer_in(1, kMaxNumSeqsFlag));
  cmd->add_option("--max-num-batched-tokens", o.max_num_batched_tokens,
                  "Tokens of one forward step, all requests together (0: 8192 on a GPU, 2048 on the CPU)")
      ->capture_default_str()
      ->check(integer_in(0, kMaxTokensFlag));
  cmd->add_option("--max-model-len", o.max_model_len,
                  "Longest prompt + completion a request may ask for (0: the model's maximum)")
      ->capture_default_str()
      ->check(integer_in(0, kMaxTokensFlag));
}

EngineOptions engine_options(const EngineFlags& flags) {
  EngineOptions options = flags.options;
  options.enable_prefix_caching = !flags.no_prefix_caching;
  // The values one_of admitted when the flags were parsed.
  if (flags.quantization == "fp8") options.quantization = Quantization::kFp8;
  if (flags.load_format == "dummy") options.load_format = LoadFormat::kDummy;
  if (flags.kv_cache_dtype == "fp8" || flags.kv_cache_dtype == "fp8_e4m3") options.kv_cache_dtype = KvCacheDtype::kFp8;
  if (!flags.speculative_config.empty()) options.speculative = spec::SpeculativeConfig::parse(flags.speculative_config);
  return options;
}

std::string with_flag_names(std::string message) {
  static constexpr std::pair<std::string_view, std::string_view> kFlags[] = {
      {"block_size", "--block-size"},
      {"kv_cache_memory", "--kv-cache-memory"},
      {"host_kv_cache_memory", "--host-kv-cache-memory"},
      {"gpu_memory_utilization", "--gpu-memory-utilization"},
      {"max_num_seqs", "--max-num-seqs"},
      {"max_num_batched_tokens", "--max-num-batched-tokens"},
      {"max_model_len", "--max-model-len"},
      {"kv_cache_dtype", "--kv-cache-dtype"},
  };
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (const auto& [field, flag] : kFlags) {
    for (size_t at = message.find(field); at != std::string::npos; at = message.find(field, at)) {
      const size_t end = at + field.size();
      if ((at > 0 && word_char(message[at - 1])) || (end < message.size() && word_char(message[end]))) {
        at = end;
        continue;
      }
      message.replace(at, field.size(), flag);
      at += flag.size();
    }
  }
  return message;
}

}  // namespace tide::cli
