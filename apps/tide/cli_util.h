// Shared by the subcommands: parsing id lists, checking flag values, building an engine, writing JSON.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "model/config.h"
#include "runtime/engine.h"

namespace tide::cli {

// Parses "5,17,42" (spaces allowed). Throws tide::Error naming `flag` on anything else.
std::vector<int32_t> parse_ids(const std::string& text, const std::string& flag);
// The backend named by --device: "cpu", "cuda", or "auto" (cuda when this build has it and a GPU is present).
std::unique_ptr<Backend> make_backend(const std::string& device);
// The engine's flags, shared by the commands that load one (generate, serve): the device, KV cache, batching,
// graphs, quantization, --max-model-len.
struct EngineFlags {
  std::string device = "auto";
  EngineOptions options;
  bool no_prefix_caching = false;
  // The flags of EngineOptions' enums as given (checked against their values when parsed); engine_options()
  // turns them into the enums. Empty: the option's default.
  std::string quantization, load_format, kv_cache_dtype;
  std::string speculative_config;  // vLLM's --speculative-config JSON; empty: no speculation
};
// Checks of flag values whose refusals say the accepted values in words: the message of each starts with
// "must" or "is", and main prints it after the flag's name ("--block-size must be a positive power of two
// ≤ 256, got 0"), where CLI11's own range checks print the limits of a double in 309 digits. Refusals are
// usage errors (exit status 2).
// An integer in [min, max] (max INT64_MAX: "an integer ≥ min").
CLI::Validator integer_in(int64_t min, int64_t max);
// A power of two in [1, max].
CLI::Validator power_of_two_at_most(int64_t max);
// A finite number in [min, max], or (min, max] when `min_exclusive`.
CLI::Validator number_in(double min, double max, bool min_exclusive = false);
// One of `values`.
CLI::Validator one_of(std::vector<std::string> values);
// A non-empty value; `hint` says what to give instead ("is empty: HINT").
CLI::Validator not_empty(std::string hint);
// A byte count, plain or with a unit (512MiB, 2GB, 1TiB; CLI11's AsSizeValue), at least `min`; the value
// becomes the number of bytes.
CLI::Validator byte_size(int64_t min);
// Longest --max-tokens / --min-tokens / --max-model-len / --max-num-batched-tokens: no model's context is
// longer (config.h's bound of max_position_embeddings), and the sums the engine forms from them stay in range.
inline constexpr int64_t kMaxTokensFlag = kMaxConfigPositions;
// Largest --block-size (positions per KV block; a power of two) and --max-num-seqs.
inline constexpr int64_t kMaxBlockSizeFlag = 256;
inline constexpr int64_t kMaxNumSeqsFlag = 65536;
// Registers EngineFlags' options on `cmd`; `flags` must outlive the parse.
void add_engine_flags(CLI::App* cmd, EngineFlags& flags);
// The EngineOptions the flags ask for.
EngineOptions engine_options(const EngineFlags& flags);
// `message` (a tide::Error's) with the engine options it names by their EngineOptions field names
// ("max_model_len must be ...") spelled as the flags that set them ("--max-model-len must be ...").
std::string with_flag_names(std::string message);
// Prints `j` on one line; invalid UTF-8 inside strings is replaced, never an exception.
void print_json(const nlohmann::json& j);
// Tells stderr when `tokenizer` is the stand-in of a folder without tokenizer files (Tokenizer::stand_in), whose
// text is not the model's; does nothing otherwise.
void note_stand_in_tokenizer(const Tokenizer& tokenizer, const std::string& model);

}  // namespace tide::cli
