// Writing FP8 checkpoints: a float Hugging Face model folder -> the same folder with its linear layers in
// compressed-tensors' FP8 format (what vLLM's loader reads for "FP8-Dynamic" models): each
// model.layers.N.{self_attn.{q,k,v,o}_proj,mlp.{gate,up,down}_proj}.weight becomes F8_E4M3 [out, in] with a
// `weight_scale` F32 [out, 1] (rowwise, core/fp8.h), activations quantized per token at run time (declared in
// config.json's quantization_config); embedding, lm_head and norms keep their dtype. Tide loads the result back
// with the very codes and scales `--quantization fp8` computes at load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>

namespace tide {

struct QuantizeReport {
  int64_t num_quantized = 0;  // linear weights written as FP8
  int64_t num_copied = 0;     // other tensors, as they were
  int64_t num_shards = 0;     // safetensors files written
  int64_t bytes_in = 0, bytes_out = 0;
};

// Writes `out_dir` (created; it must not exist or be empty, and must not be `in_dir`): config.json with a
// quantization_config, the FP8 safetensors (shards of at most `max_shard_bytes` with an index when more than
// one), and every other file of `in_dir` (tokenizer, generation config, templates) copied. Streams shard by
// shard, so memory stays near one shard for any model size. `progress(done, total)` counts input bytes.
// Throws tide::Error naming the file or tensor (an already-FP8 checkpoint, a config that is not Cohere2, I/O).
QuantizeReport quantize_checkpoint_fp8(const std::filesystem::path& in_dir, const std::filesystem::path& out_dir,
                                       int64_t max_shard_bytes = int64_t{4} << 30,
                                       const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace tide
