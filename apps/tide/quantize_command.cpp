// tide quantize: writes an FP8 copy of a model folder (compressed-tensors format, model/quantize.h).
#include <cstdio>
#include <memory>

#include <unistd.h>

#include "apps/tide/cli_util.h"
#include "apps/tide/commands.h"
#include "core/error.h"
#include "model/quantize.h"

namespace tide::cli {

void add_quantize_command(CLI::App& app) {
  struct Args {
    std::string model, out;
    int64_t shard_size = int64_t{4} << 30;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "quantize", "Write an FP8 copy of a model (linear layers E4M3 with one scale per row, compressed-tensors format)");
  cmd->add_option("--model", args->model, "Hugging Face model folder with BF16, F16 or F32 weights")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--out", args->out, "Folder to write (must not exist or be empty)")
      ->required()
      ->check(not_empty("give the folder to write"));
  cmd->add_option("--shard-size", args->shard_size, "Largest safetensors file written (suffixes like 4GiB accepted)")
      ->capture_default_str()
      ->transform(byte_size(1));
  cmd->callback([args] {
    const bool terminal = isatty(fileno(stderr)) != 0;  // a percentage redrawn in place, on a terminal only
    int last = -1;
    const QuantizeReport r = quantize_checkpoint_fp8(args->model, args->out, args->shard_size, [&](int64_t done, int64_t total) {
      const int percent = total > 0 ? static_cast<int>(100 * done / total) : 100;
      if (!terminal || percent == last) return;
      last = percent;
      std::fprintf(stderr, "\rquantizing: %3d%%%s", percent, percent == 100 ? "\n" : "");
    });
    print_json({{"out", args->out},
                {"quantized_tensors", r.num_quantized},
                {"copied_tensors", r.num_copied},
                {"shards", r.num_shards},
                {"bytes_in", r.bytes_in},
                {"bytes_out", r.bytes_out}});
  });
}

}  // namespace tide::cli
