// Launchers of the CUDA backend's kernels (raw pointers, sizes and a stream, in parameter structs; see
// docs/design/kernels.md). Only CudaBackend calls them, after checking shapes and dtypes. Activations, weights and the KV cache
// are bf16; reductions and softmax run in f32.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/fast_divmod.h"

// Defined in sampling_math.h; only declared here, so that the attention kernels do not rebuild whenever the
// sampling arithmetic changes.
namespace tide {
struct SamplingRow;
struct HistoryToken;
}  // namespace tide

namespace tide::cuda {

using bf16 = __nv_bfloat16;

// The longest row the per-token row kernels (layer norm and its fusions, FP8 quantization, SwiGLU with FP8
// output) take: they hold a row in registers (row_tile.cuh).
inline constexpr int64_t kMaxRowElements = 40960;

// Whether the launchers ask for programmatic dependent launch (launch.cuh; on by default, process-wide;
// benchmarks turn it off to measure what it saves).
bool programmatic_launch();
void set_programmatic_launch(bool on);

// out[i] = src[index[i]]: the embedding (the table's rows of the token ids, range-checked on the host) and
// the gather of rows.
struct GatherRowsParams {
  bf16* out;             // [R, H]
  const bf16* src;       // [V, H] (a table) or [T, H]
  const int32_t* index;  // [R]
  int64_t num_rows, hidden;
};
void launch_gather_rows(const GatherRowsParams& p, cudaStream_t stream);

// out = w * (x - mean) / sqrt(var + eps), per row; with h, x is first the residual update h = (h + a) + b
// (bf16 after each add, h updated in place); with out8, the bf16 output is quantized per token as
// launch_quantize_fp8 would (the same bits) instead of written.
struct LayerNormParams {
  bf16* out = nullptr;       // [T, H] (may alias x), or null with out8:
  uint8_t* out8 = nullptr;   // [T, H] e4m3 codes
  float* scales = nullptr;   // [T]
  const bf16* x = nullptr;   // [T, H], or null with the residual h, a, b: [T, H]
  bf16* h = nullptr;
  const bf16* a = nullptr;
  const bf16* b = nullptr;
  const bf16* w = nullptr;   // [H]
  int64_t num_tokens = 0, hidden = 0;
  float eps = 0;
};
void launch_layer_norm(const LayerNormParams& p, cudaStream_t stream);

// In place on heads [0, num_rope_heads) of each row.
struct RopeParams {
  bf16* qkv;                 // [T, row_size]
  const int32_t* positions;  // [T]
  const float* inv_freq;     // [D / 2] f32
  int64_t num_tokens, row_size, num_rope_heads, head_dim;
};
void launch_rope(const RopeParams& p, cudaStream_t stream);

// The K and V heads of each qkv row into layer `layer` of the cache at slot_mapping[t] (< 0: padding, skipped):
// a bf16 cache, or an FP8 cache's codes and one scale per head's vector (backend.h, KvStorage).
struct KvStoreParams {
  bf16* cache = nullptr;               // [num_blocks, num_layers, 2, block_size, Hkv * D], or null with FP8:
  uint8_t* codes = nullptr;            // the same layout
  float* scales = nullptr;             // [num_blocks, num_layers, 2, Hkv, block_size]
  bf16* qkv = nullptr;                 // [T, (Hq + 2 Hkv) * D]
  const int32_t* positions = nullptr;  // [T] (launch_rope_store_kv)
  const float* inv_freq = nullptr;     // [D / 2] (launch_rope_store_kv)
  const int64_t* slot_mapping = nullptr;  // [T]
  int64_t num_tokens = 0, num_heads = 0, num_heads_kv = 0, head_dim = 0;
  int64_t num_layers = 0, layer = 0, block_size = 0;
};
void launch_store_kv(const KvStoreParams& p, cudaStream_t stream);
// launch_store_kv into an FP8 cache (kv_fp8.cu; launch_store_kv calls it when p.codes is set).
void launch_store_kv_fp8(const KvStoreParams& p, cudaStream_t stream);
// launch_rope on the q and k heads, then launch_store_kv, in one kernel.
void launch_rope_store_kv(const KvStoreParams& p, cudaStream_t stream);

// out = silu(gate) * up; the _fp8 launchers quantize it per token instead (the same bits as silu_mul then
// quantize_fp8).
struct SiluMulParams {
  bf16* out = nullptr;          // [T, I] (launch_silu_mul)
  uint8_t* out8 = nullptr;      // [T, I] e4m3 codes (the _fp8 launchers)
  float* scales = nullptr;      // [T]
  const bf16* gate_up = nullptr;  // [T, 2I]
  int64_t num_tokens = 0, inter = 0;
  uint32_t* sync = nullptr;     // launch_silu_mul_fp8_split: a stream's split scratch at kSwigluSplitSyncOffset
};
void launch_silu_mul(const SiluMulParams& p, cudaStream_t stream);
void launch_silu_mul_fp8(const SiluMulParams& p, cudaStream_t stream);
// The same for up to 8 tokens, each token's row spread over CTAs of 2048 elements that exchange their maxima
// through `sync` (below): at decode sizes one CTA per row leaves most SMs idle. How many CTAs per token it
// takes, or 0 for a shape it does not take.
inline constexpr int kSwigluSplitElements = 2048;  // per CTA
inline constexpr int64_t kSwigluSplitMaxTokens = 8;
int silu_mul_fp8_split_parts(int64_t num_tokens, int64_t inter);
void launch_silu_mul_fp8_split(const SiluMulParams& p, cudaStream_t stream);

// out = a + b over n elements.
struct AddParams {
  bf16* out;
  const bf16* a;
  const bf16* b;
  int64_t n;
};
void launch_add(const AddParams& p, cudaStream_t stream);

// Per-token FP8 quantization (core/fp8.h): scales[r] = amax(row r) / 448, out = e4m3(x / scale).
struct QuantizeFp8Params {
  uint8_t* out;     // [rows, cols]
  float* scales;    // [rows]
  const void* x;    // [rows, cols] bf16, or f32 with x_f32 (launch_quantize_fp8_rows only)
  bool x_f32;
  int64_t rows, cols;
};
// Rows of at most kMaxRowElements bf16 values, held in registers.
void launch_quantize_fp8(const QuantizeFp8Params& p, cudaStream_t stream);
// The same codes and scales for rows of any length, bf16 or f32: one CTA per row reading it twice (weights
// quantized at load; rows longer than kMaxRowElements).
void launch_quantize_fp8_rows(const QuantizeFp8Params& p, cudaStream_t stream);

// FP8 matmul for decode-sized batches (fp8_small_matmul.cu): out[T, N] = alpha * x_scales[t] * w_scales[n] *
// sum_k x8[t][k] w8[n][k], e4m3 products summed in f32. x8, w8 rows 16-byte aligned.
inline constexpr int64_t kFp8SmallMatmulMaxTokens = 16;
struct Fp8SmallMatmul {
  void* out;               // [T, N] bf16, or f32 with out_f32
  bool out_f32;
  const uint8_t* x8;       // [T, K]
  const float* x_scales;   // [T]
  const uint8_t* w8;       // [N, K]
  const float* w_scales;   // [N]
  float alpha;
  int64_t num_tokens, k, n;
  // The kernel and its shape (tests, benchmarks: tide_bench --fp8-variant): -1 the streaming kernel, its stages
  // picked per matrix (fp8_small_matmul.cu), -2 the register-fed kernel with its shape picked per matrix, 0 ..
  // fp8_small_matmul_num_variants() - 1 one shape (the register-fed kernel's, then the streaming kernel's).
  int variant = -1;
  // Zeroed scratch of the stream's split tiles (fp8_stream_matmul.cu), fp8_split_scratch_bytes() long; one
  // per stream (kernels of one stream use it one after another). Its counters are left zero by every kernel.
  void* split_scratch = nullptr;
};
// How many kernel shapes there are (variants 0 .. n-1; one that does not suit T falls back to the pick).
int fp8_small_matmul_num_variants();
// Whether the kernel takes this shape: 1 <= T <= kFp8SmallMatmulMaxTokens, K a multiple of 16.
bool fp8_small_matmul_supports(int64_t num_tokens, int64_t k, int64_t n);
void launch_fp8_small_matmul(const Fp8SmallMatmul& p, int num_sms, cudaStream_t stream);
// bf16 matmul on the same kernel (fp8_small_matmul.cu): out[T, N] = alpha * sum_k x[t][k] w[n][k], products and
// sums in f32, tokens in groups of up to 16 per CTA. K a multiple of 8, x and w 16-byte aligned.
inline constexpr int64_t kBf16SmallMatmulMaxTokens = int64_t{1} << 20;
struct Bf16SmallMatmul {
  void* out;  // [T, N] bf16, or f32 with out_f32
  bool out_f32;
  const bf16* x;  // [T, K]
  const bf16* w;  // [N, K]
  float alpha;
  int64_t num_tokens, k, n;
};
bool bf16_small_matmul_supports(int64_t num_tokens, int64_t k, int64_t n);
void launch_bf16_small_matmul(const Bf16SmallMatmul& p, int num_sms, cudaStream_t stream);
// Which bf16 matmuls the engine gives the kernel (bf16_small_matmul_preferred): weights of at most
// kBf16SmallMatmulAnyTokensBytes at up to kBf16SmallMatmulAnyTokensMax tokens (a small model's decode, verify
// and short prefill steps), and of at most kBf16SmallMatmulDecodeBytes at up to kBf16SmallMatmulDecodeTokens.
// There cuBLASLt's fixed cost per launch is most of its time and the kernel's one pass is faster; on larger
// weights cuBLASLt's GEMV streams them faster, and at more tokens its tiled kernels compute faster (the demo
// model's eager prefill steps: 256 tokens 0.53 against 0.86 ms, 1024 tokens 1.04 against 0.88; its linear
// layers at 8192 tokens 4.8 against 0.39 ms; docs/perf-log/2026-12.md, 2026-12-05).
inline constexpr int64_t kBf16SmallMatmulDecodeTokens = 16;
inline constexpr int64_t kBf16SmallMatmulDecodeBytes = int64_t{8} << 20;
inline constexpr int64_t kBf16SmallMatmulAnyTokensMax = 256;
inline constexpr int64_t kBf16SmallMatmulAnyTokensBytes = int64_t{2} << 20;
// A token's outputs do not depend on how many tokens share the launch (its sums run in the same order at
// every T), so where a model's matmuls all take the kernel, a token's rows are the same bits in a decode step,
// a speculative verify step, or a batch or prefill chunk of up to kBf16SmallMatmulAnyTokensMax tokens.
constexpr bool bf16_small_matmul_preferred(int64_t num_tokens, int64_t k, int64_t n) {
  const int64_t bytes = 2 * k * n;
  return num_tokens >= 1 &&
         ((num_tokens <= kBf16SmallMatmulAnyTokensMax && bytes <= kBf16SmallMatmulAnyTokensBytes) ||
          (num_tokens <= kBf16SmallMatmulDecodeTokens && bytes <= kBf16SmallMatmulDecodeBytes));
}
// The same product with the weights streamed through shared memory by bulk copies (fp8_stream_matmul.cu), in
// one of its shapes (fp8_small_matmul.cu names the ones its dispatch takes).
struct Fp8StreamShape {
  bool tensor_map;  // one tensor-map copy per stage where the shape allows (K a multiple of 64), else one bulk
                    // copy per weight row
  int stages;       // stages of 16-17 KB in flight per CTA, 2 .. kFp8StreamMaxStages (0: 2 or 4 by the length
                    // of a CTA's stream)
  int ctas_per_sm;  // 1 or 2 at most (fewer where whole row tiles then balance: stream_k_grid)
};
inline constexpr int kFp8StreamMaxStages = 8;
inline constexpr size_t kFp8SplitCountersBytes = 8192;
// The split SwiGLU's words in those counters' bytes, after the stream-K counters: an epoch per token (it only
// advances), then per token kSwigluSplitMaxParts slots of 64 bits, each CTA's (epoch, largest magnitude).
inline constexpr size_t kSwigluSplitSyncOffset = 2048;
inline constexpr int kSwigluSplitMaxParts = 32;
inline constexpr int kSwigluSplitEpochWords = 16;  // kSwigluSplitMaxTokens words, padded to 64 bytes
static_assert(kSwigluSplitEpochWords >= kSwigluSplitMaxTokens);
static_assert(kSwigluSplitSyncOffset + 4 * kSwigluSplitEpochWords + 8 * kSwigluSplitMaxTokens * kSwigluSplitMaxParts <=
              kFp8SplitCountersBytes);
size_t fp8_split_scratch_bytes(int num_sms);
void launch_fp8_stream_matmul(const Fp8SmallMatmul& p, const Fp8StreamShape& shape, int num_sms, cudaStream_t stream);
// The same product for 17-256 tokens on wgmma (fp8_wgmma_matmul.cu), with p.split_scratch at least
// fp8_wgmma_scratch_bytes() long (its counters shared with the streaming kernel's). False, having launched
// nothing, where the driver cannot encode the tensor maps or x8 / w8 are not 16-byte aligned.
inline constexpr int64_t kFp8WgmmaMatmulMaxTokens = 256;
// The tokens of a wgmma tile for T tokens (1 .. 256): the smallest of 32, 64, 96, 128 (one instruction),
// 160, 192, 256 (two) that holds them.
constexpr int fp8_wgmma_tile_tokens(int64_t t) {
  for (const int w : {32, 64, 96, 128, 160, 192}) {
    if (t <= w) return w;
  }
  return 256;
}
static_assert(fp8_wgmma_tile_tokens(17) == 32 && fp8_wgmma_tile_tokens(65) == 96 && fp8_wgmma_tile_tokens(160) == 160 &&
              fp8_wgmma_tile_tokens(161) == 192 && fp8_wgmma_tile_tokens(256) == 256);
// Whether CudaBackend::matmul_fp8 gives T tokens (17 .. 256) to the wgmma kernel by default: at the tile
// widths where it ran R7B's decode and verify steps faster than cuBLASLt's FP8 kernels (docs/perf-log/2026-12.md).
// At 128, 192 and 256 it loses: every CTA re-reads the tile's tokens from L2 (as many bytes as its weights at
// 128 tokens), and its stages shrink (6 at 128 tokens, 4 at 192) where cuBLASLt's tiles share them.
constexpr bool fp8_wgmma_preferred(int64_t t) {
  const int w = fp8_wgmma_tile_tokens(t);
  return t <= kFp8WgmmaMatmulMaxTokens && (w == 32 || w == 64 || w == 96 || w == 160);
}
static_assert(fp8_wgmma_preferred(64) && fp8_wgmma_preferred(96) && !fp8_wgmma_preferred(128) &&
              fp8_wgmma_preferred(160) && !fp8_wgmma_preferred(161) && !fp8_wgmma_preferred(257));
// The SMs (CTAs) a wgmma matmul of T tokens takes while the other stream's chain runs beside it (CudaBackend
// between side_begin and side_join: in a Cohere2 layer the MLP's gate_up and down on the side stream, the
// attention chain's qkv and o on the main one). Each CTA holds an SM's registers, so with every matmul on every
// SM the two chains' kernels ran in turn and the attention chain waited for gate_up's CTAs at every layer; with
// shares they run at once. The side stream's matmuls take 8/11 of the SMs (96 of 132), the main stream's
// 4/11, or 3/11 at tiles over 96 tokens (a verify step's 160), where their products weigh more: the best of
// the splits measured on R7B FP8 decode and verify steps (docs/perf-log/2026-12.md, 2026-12-06).
constexpr int fp8_wgmma_stream_sms(int num_sms, bool side, int64_t t) {
  const int elevenths = side ? 8 : (fp8_wgmma_tile_tokens(t) > 96 ? 3 : 4);
  const int sms = num_sms * elevenths / 11;
  return sms > 0 ? sms : 1;
}
static_assert(fp8_wgmma_stream_sms(132, true, 32) == 96 && fp8_wgmma_stream_sms(132, false, 64) == 48 &&
              fp8_wgmma_stream_sms(132, false, 160) == 36 && fp8_wgmma_stream_sms(1, false, 32) == 1);
bool fp8_wgmma_matmul_supports(int64_t num_tokens, int64_t k, int64_t n);
size_t fp8_wgmma_scratch_bytes(int num_sms);
bool launch_fp8_wgmma_matmul(const Fp8SmallMatmul& p, int num_sms, cudaStream_t stream);
// The layout the tensor-map copies use on this driver: "step-major", "row-major" or "none" (none encodes:
// every stage is then copied row by row).
const char* fp8_stream_tensor_feed();

struct PagedAttentionParams {
  bf16* out;                   // [T, Hq * D]
  const bf16* qkv;             // [T, (Hq + 2 Hkv) * D]
  const bf16* cache;           // [num_blocks, num_layers, 2, block_size, Hkv * D]; null with an FP8 cache:
  const uint8_t* cache8;       // its codes, same layout (the tensor-core kernels only)
  const float* scales;         // [num_blocks, num_layers, 2, Hkv, block_size]
  const int32_t* positions;    // [T]
  const int32_t* seq_starts;   // [S + 1]
  const int32_t* block_tables; // [S, max_blocks]
  // The sequences a launch serves, as indices into seq_starts and block_tables: seq_list[0 .. num_seqs); null: all
  // S of them in order (num_seqs = S). A mixed step's decode sequences go to one kernel, the others to another.
  const int32_t* seq_list;
  int64_t num_tokens, num_seqs, max_blocks;
  int64_t num_heads, num_heads_kv, head_dim;
  int64_t num_layers, layer, block_size, num_blocks;
  FastDivmod block_div;        // division by block_size (the K/V copies' block-table lookups)
  int64_t window;              // 0: global
  float scale;
};
// Tensor-core attention (mma.sync), head_dim 64, 128 or 256 (mma_attention.cu).
bool mma_attention_supports(int64_t head_dim);
// Which kernel serves prefill attention where both can: head_dim 128 (a bf16 or FP8 cache). kAuto is the
// wgmma kernel; the choice depends on the model's shape only, never on a batch, so that a prompt's outputs do not
// depend on how it was cut into chunks (the kernels round differently).
enum class PrefillAttentionKernel { kAuto, kMmaSync, kWgmma };
// Prefill / chunked prefill: any batch, any number of query heads per KV head; max_seq_tokens is the most new
// tokens any sequence has in the batch (host value; sizes the grid).
void launch_mma_prefill(const PagedAttentionParams& p, int64_t max_seq_tokens, PrefillAttentionKernel kernel,
                        cudaStream_t stream);
// Decode (one CTA per token, KV head and split of the keys): at most 16 query heads per KV head. Sequences with
// several new tokens (max_seq_tokens > 1, a speculative verify step) put up to mma_decode_max_rows / group
// consecutive tokens of a sequence in one CTA (mma_decode_tokens_per_cta), which then reads their keys once: 24
// rows at head_dim <= 128 (a verify step of 1 + 4 or 1 + 5 tokens with R7B's group of 4, two tokens of Command
// A's group of 12), 16 at 256 (registers).
bool mma_decode_supports(int64_t head_dim, int64_t group);
int mma_decode_max_rows(int64_t head_dim);
int mma_decode_tokens_per_cta(int64_t head_dim, int64_t group, int64_t max_seq_tokens);
// The CTAs per KV head and split of a decode launch: one per token, or per tile of a sequence's tokens (always
// with a sequence list, PagedAttentionParams::seq_list: `listed`).
int64_t mma_decode_ctas(int64_t head_dim, int64_t num_tokens, int64_t num_seqs, int64_t group, int64_t max_seq_tokens,
                        bool listed = false);
// The tokens a decode launch's split outputs are kept for (rows of its part_out / part_ml, times heads and
// splits): every token of the batch, or with a sequence list the listed sequences' tiles only.
int64_t mma_decode_slot_tokens(int64_t head_dim, int64_t num_tokens, int64_t num_seqs, int64_t group,
                               int64_t max_seq_tokens, bool listed = false);
// The most keys one CTA of a decode launch spans (the bound mma_decode_plan takes): a token's keys from 0, or
// with a window from its first token's window start aligned down to a 64-key tile, to its last token's position
// (`max_position`: the step's largest, or an upper bound of it).
int64_t mma_decode_max_keys(int64_t window, int64_t max_position, int64_t max_seq_tokens);
// How a decode launch spreads over the GPU: the splits of each token's keys, and the CTAs per SM its kernel is
// built for (3: short stages, many CTAs; 2: deeper stages, for long splits).
struct DecodePlan {
  int splits = 1;
  int ctas_per_sm = 2;
};
// The plan for `ctas` CTAs per KV head and split (mma_decode_ctas) on a GPU with `num_sms` multiprocessors, when a
// token attends to at most `max_keys` keys. force_ctas_per_sm 2 or 3 takes that many CTAs per SM where the shape
// allows it (3: head_dim <= 128 and at most 8 query rows per CTA); 0 chooses by the splits' length.
DecodePlan mma_decode_plan(int64_t ctas, int64_t num_heads_kv, int64_t max_keys, int num_sms, int64_t head_dim,
                           int64_t group, int64_t max_seq_tokens, int force_ctas_per_sm = 0);
// part_out: [T, Hq, splits, D] f32 and part_ml: [T, Hq, splits, 2] f32 scratch (unused with one split).
// max_keys: the most keys a token attends to (as given to mma_decode_plan); max_seq_tokens: the most new
// tokens of a sequence in the batch (host value).
void launch_mma_decode(const PagedAttentionParams& p, int64_t max_keys, int64_t max_seq_tokens, float* part_out,
                       float* part_ml, const DecodePlan& plan, cudaStream_t stream);

// Prefill attention over an FP8 cache on the bf16 kernels (kv_fp8.cu): the K and V of layer p.layer in the table
// columns each listed sequence of `p` reads (prefill_key_blocks in prefill_tiling.h), dequantized into `scratch`
// [scratch_blocks, 2, block_size, Hkv * D] bf16 (one layer per block; sequence after sequence), and the listed
// sequences' rows of `tables` [S, max_blocks] i32 pointing there (kNullBlock for every other column and for null
// blocks). Exact wherever the value is a normal bf16 one: an E4M3 code and a KV scale (fp8::kv_scale_for_amax)
// have 4 significant bits each. The bf16 kernels then read what the FP8 kernels read, as bf16 values.
// scratch_blocks: at least kv_dequantize_scratch_blocks(p, max_position, max_seq_tokens), the host's bound on the
// listed sequences' columns from the step's largest position and most new tokens of a sequence.
int64_t kv_dequantize_scratch_blocks(const PagedAttentionParams& p, int64_t max_position, int64_t max_seq_tokens);
void launch_kv_dequantize_for_prefill(const PagedAttentionParams& p, int64_t max_position, int64_t max_seq_tokens,
                                      bf16* scratch, int64_t scratch_blocks, int32_t* tables, cudaStream_t stream);

// Generic CUDA-core kernel (attention.cu), for head_dims the tensor-core kernels do not instantiate.
// Whether the attention kernel handles this head_dim and number of query heads per KV head.
bool paged_attention_supports(int64_t head_dim, int64_t group);
// How many splits of the keys a launch uses for this batch on a GPU with `num_sms` multiprocessors, when a
// token attends to at most `max_keys` keys.
int paged_attention_splits(int64_t num_tokens, int64_t num_heads_kv, int64_t max_keys, int num_sms);
// part_out: [T, Hq, splits, D] f32 and part_ml: [T, Hq, splits, 2] f32 scratch.
void launch_paged_attention(const PagedAttentionParams& p, float* part_out, float* part_ml, int num_splits,
                            cudaStream_t stream);

// data[i] = uniform_fill::value(seed, i, center, amplitude) for i < n (fill.cu), as bf16 (rounded to nearest
// even) or f32 (data_f32). data 16-byte aligned.
struct FillUniformParams {
  void* data;
  bool data_f32;
  int64_t n;
  float center, amplitude;
  uint64_t seed;
};
void launch_fill_uniform(const FillUniformParams& p, cudaStream_t stream);

// The sample op (sampling.cu): one CTA per row.
struct SampleParams {
  int32_t* out_ids;               // [R]
  float* logits;                  // [R, V], penalized in place
  const SamplingRow* rows;        // [R]
  const int32_t* history_starts;  // [R + 1], or null: no history
  const HistoryToken* history;    // [N]
  const int32_t* mask_index;      // [R], or null: no row constrained
  const uint32_t* masks;          // [M, ceil(V / 32)]
  // Speculative sampling (Backend::sample_with_drafts), or all null: row r checks draft draft_index[r] when >= 0.
  const float* draft_logits;      // [J, V], not modified
  const SamplingRow* draft_rows;  // [J]
  const int32_t* draft_ids;       // [J]
  const int32_t* draft_index;     // [R]
  int64_t num_rows, vocab;
};
void launch_sample(const SampleParams& p, cudaStream_t stream);

// The logprobs op (logprobs.cu): one CTA per row. The list each thread keeps holds kLogprobsSlots tokens:
// n <= kLogprobsSlots (== kMaxLogprobs of backend.h, checked in cuda_backend.cpp).
inline constexpr int kLogprobsSlots = 20;
struct LogprobsParams {
  float* out_values;           // [R, 1 + n]: the chosen id's logprob (NaN when it is outside [0, V)), then the top n
  int32_t* out_ids;            // [R, n]
  const float* logits;         // [R, V], not modified
  const int32_t* chosen_ids;   // [R]
  int64_t num_rows, vocab;
  int n;                       // 0 .. kLogprobsSlots
};
void launch_logprobs(const LogprobsParams& p, cudaStream_t stream);

}  // namespace tide::cuda
