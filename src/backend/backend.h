// Backend: the narrow op interface the model's forward pass is written against. One implementation per
// device: cpu/ is the reference and the executable specification, cuda/ runs the same ops on a Hopper GPU
// (docs/design/kernels.md). All tensors passed to ops live in the backend's memory; activations are f32 on the
// CPU backend, bf16 on the CUDA backend.
//
// Shapes use T = tokens in the batch, S = sequences in the batch, H = hidden size, D = head dim.
// The fused qkv activation is [T, (num_heads + 2 * num_heads_kv) * D]: q heads, then k heads, then v heads.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/sampling_math.h"
#include "core/error.h"
#include "core/kv_block.h"
#include "core/tensor.h"

namespace tide {

struct AttentionShape {
  int64_t num_heads = 0;
  int64_t num_heads_kv = 0;
  int64_t head_dim = 0;
};

// A sequence with at most this many new tokens in a step is a decode (or a speculative verify) to attention: a
// backend may serve it with a kernel built for few query rows per sequence, also in a step that prefills others.
inline constexpr int64_t kDecodeSeqTokens = 8;

// Per-forward description of where each token's keys and values live, for one layer group.
struct AttentionBatch {
  Tensor positions;      // [T] i32: position of each token in its sequence
  Tensor seq_starts;     // [S + 1] i32: tokens of sequence s are [seq_starts[s], seq_starts[s+1])
  Tensor block_tables;   // [S, max_blocks] i32: physical block of logical block i, or kNullBlock
  Tensor slot_mapping;   // [T] i64: block * block_size + offset where the token's K/V are stored
  int64_t block_size = 0;
  int64_t max_position = 0;    // host copy of the largest position in `positions` (sizes kernel launches)
  int64_t max_seq_tokens = 0;  // host copy of the most new tokens of one sequence (1: decode only)
  // Optional (empty: not given): the sequences [S] i32 in decode-first order (DecodeFirstOrder), with host copies
  // of how many decodes come first and their most new tokens. A backend may then serve a mixed step's decodes and
  // its prefill chunks with different kernels.
  Tensor seq_order = {};
  int64_t num_decode_seqs = 0;
  int64_t max_decode_seq_tokens = 0;
};

// The sequences of a step, those with at most kDecodeSeqTokens new tokens (decodes) first, then the others, each
// kind in batch order; `seq_starts` [S + 1] as in AttentionBatch.
struct DecodeFirstOrder {
  std::vector<int32_t> order;
  int64_t num_decode_seqs = 0;
  int64_t max_decode_seq_tokens = 0;  // the most new tokens of a decode (0: none)
};
DecodeFirstOrder decode_first_order(std::span<const int32_t> seq_starts);

// Prefill attention over an FP8 KV cache may take up to this much scratch in one call: the CUDA backend
// dequantizes the blocks a prefill reads into bf16 for its bf16 kernels where they fit (else its FP8 kernels
// read the codes). The engine reserves it beside the arena when the cache is FP8 (at most what
// max_num_seqs x max_model_len positions of one layer take in bf16).
inline constexpr int64_t kFp8KvPrefillScratchBytes = int64_t{1} << 30;

// The element type of the KV cache: the backend's activation dtype, or FP8 E4M3 with one scale per stored
// vector (--kv-cache-dtype fp8).
enum class KvCacheDtype { kAuto, kFp8 };

// KV storage of one layer group: data [num_blocks, num_layers_in_group, 2 (K, V), block_size, num_heads_kv, D].
// FP8 (data F8E4M3): each head's D values of one position's K (or V) are one vector, quantized with its own
// scale, amax / 448 rounded up to 4 significant bits (fp8::kv_scale_for_amax); `scales` [num_blocks,
// num_layers_in_group, 2, num_heads_kv, block_size] F32 holds them (a head's positions of a block together),
// and is empty otherwise.
struct KvStorage {
  Tensor data;
  int64_t num_layers = 0;
  int64_t block_size = 0;
  Tensor scales = {};

  bool fp8() const { return data.dtype == DType::kF8E4M3; }
};

// Bytes of one block of a layer group's KvStorage: K and V of `num_layers` layers for `block_size` positions,
// `num_heads_kv` vectors of `head_dim` values of `dtype` per position, and with FP8 codes (kF8E4M3) an F32
// scale per vector. The one formula the arena's sizing, the model and the benchmarks use.
inline int64_t kv_block_bytes(DType dtype, int64_t num_layers, int64_t block_size, int64_t num_heads_kv,
                              int64_t head_dim) {
  const int64_t scale_bytes = dtype == DType::kF8E4M3 ? static_cast<int64_t>(sizeof(float)) : 0;
  const int64_t vector_bytes = head_dim * static_cast<int64_t>(dtype_size(dtype)) + scale_bytes;
  return num_layers * 2 * block_size * num_heads_kv * vector_bytes;
}

// The memory of block `block` of `kv`: its data, then its scales (none unless FP8). A host slot holds the
// two parts in this order.
struct KvBlockPart {
  unsigned char* ptr;
  size_t bytes;
};
inline std::array<KvBlockPart, 2> kv_block_parts(const KvStorage& kv, int64_t block) {
  const auto blocks = static_cast<size_t>(kv.data.dim(0)), b = static_cast<size_t>(block);
  if (blocks == 0) return {};
  const size_t data = kv.data.nbytes() / blocks, scales = kv.fp8() ? kv.scales.nbytes() / blocks : 0;
  return {KvBlockPart{static_cast<unsigned char*>(kv.data.data) + b * data, data},
          KvBlockPart{kv.fp8() ? static_cast<unsigned char*>(kv.scales.data) + b * scales : nullptr, scales}};
}

// Bytes of one block of `kv` (K and V of all its layers for block_size positions, and their scales).
inline size_t kv_block_bytes(const KvStorage& kv) {
  const std::array<KvBlockPart, 2> parts = kv_block_parts(kv, 0);
  return parts[0].bytes + parts[1].bytes;
}

// Whether `copy` addresses a block of `kv` and a slot of `host` ([slots, block bytes]).
inline bool valid_block_copy(const KvStorage& kv, const Tensor& host, const BlockCopy& copy) {
  return copy.device_block >= 0 && copy.device_block < kv.data.dim(0) && copy.host_block >= 0 &&
         copy.host_block < host.dim(0) && static_cast<size_t>(host.dim(1)) == kv_block_bytes(kv);
}

// The byte copies of `copies` in order, each block part by part (kv_block_parts) to or from its place in the
// host slot: copy(device part, host address, bytes, to_host). The backends' copy_blocks pass their memcpy.
template <typename CopyBytes>
void for_each_block_part_copy(const KvStorage& device, const Tensor& host, std::span<const BlockCopy> copies,
                              CopyBytes copy) {
  const size_t block_bytes = kv_block_bytes(device);
  for (const BlockCopy& c : copies) {
    TIDE_CHECK(valid_block_copy(device, host, c));
    unsigned char* h = static_cast<unsigned char*>(host.data) + static_cast<size_t>(c.host_block) * block_bytes;
    for (const KvBlockPart& part : kv_block_parts(device, c.device_block)) {
      if (part.bytes == 0) continue;  // no scales
      copy(part.ptr, h, part.bytes, c.direction == BlockCopy::Direction::kToHost);
      h += part.bytes;
    }
  }
}

// What the sample op needs besides the logits, in host memory: per-row parameters and RNG state, and the
// tokens the bias and the penalties touch, compact (CSR): row r's distinct tokens are
// history[history_starts[r] .. history_starts[r + 1]), each with its prompt and output counts and its bias.
// Rows may also be constrained to a set of allowed tokens (structured outputs): row r with mask_index[r] = m >= 0
// may only draw the ids whose bit is set in masks[m], a bitmask of ceil(V / 32) words (bit id % 32 of word
// id / 32); mask_index[r] = -1 leaves the row free.
struct SamplingBatch {
  std::span<const SamplingRow> rows;        // [R]
  std::span<const int32_t> history_starts;  // [R + 1], or empty when no row has a history
  std::span<const HistoryToken> history;    // [N], ids distinct within a row and < V
  std::span<const int32_t> mask_index;      // [R], or empty when no row is constrained
  std::span<const uint32_t> masks;          // [M * ceil(V / 32)]
};

// Speculative sampling against a draft model's distribution (Backend::sample_with_drafts): row r of the sample
// op with index[r] = j >= 0 checks drafted token ids[j], drawn from q_j: the distribution of the draft's logits
// row j under rows[j] (its temperature > 0, top-k, top-p and min-p as the sample op applies them; penalties
// ignored), with (rows[j].seed, rows[j].counter) the stream of the acceptance draw.
struct DraftSampling {
  Tensor logits;                      // [J, V] f32, backend memory: the draft model's logits
  std::span<const SamplingRow> rows;  // [J]
  std::span<const int32_t> ids;       // [J]
  std::span<const int32_t> index;     // [R]: -1 or a draft
};

// Throws tide::Error naming the field when `drafts` does not describe drafts for `num_rows` rows over `vocab`.
void check_draft_sampling(const DraftSampling& drafts, int64_t num_rows, int64_t vocab);

// Words of one allowed-token mask over `vocab` tokens.
inline int64_t mask_words(int64_t vocab) { return (vocab + 31) / 32; }

// Throws tide::Error naming the field when `batch` does not describe `num_rows` rows over `vocab` tokens or
// a parameter is out of range (both backends check the same way).
void check_sampling_batch(const SamplingBatch& batch, int64_t num_rows, int64_t vocab);
// The per-row part of check_sampling_batch: `row`'s parameters and its token list over `vocab` tokens. The
// engine checks each row with it before the op, so that one request's bad row ends that request alone.
void check_sampling_row(const SamplingRow& row, std::span<const HistoryToken> history, int64_t vocab);

// The most top tokens the logprobs op returns per row (OpenAI's top_logprobs limit).
inline constexpr int kMaxLogprobs = 20;

// Throws tide::Error naming the tensor when the logprobs op's arguments (Backend::logprobs) have the wrong
// dtype or shape or n is out of range. Does not read tensor data.
void check_logprobs_args(const Tensor& out_values, const Tensor& out_ids, const Tensor& logits,
                         const Tensor& chosen_ids, int n);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // --- memory ---

  // Zero-filled tensor in backend memory.
  virtual Tensor alloc(DType dtype, Shape shape) = 0;
  // A tensor its user writes in full before reading it: contents unspecified. Where zeroing costs a queued
  // op per tensor (a GPU), the backend skips it; the default zero-fills.
  virtual Tensor alloc_uninitialized(DType dtype, Shape shape) { return alloc(dtype, std::move(shape)); }
  // Zero-filled tensor in host memory that copy_blocks() can move blocks to and from quickly (pinned
  // memory on a GPU).
  virtual Tensor alloc_host(DType dtype, Shape shape) = 0;
  // Copies `host` (elements of `host_dtype`, possibly unaligned) into a new backend tensor of `dtype`,
  // converting between float types (F32, F16, BF16 -> F32 or BF16); integer data keeps its dtype. `host` may
  // be reused as soon as the call returns. The default: alloc(), then upload_into_as().
  virtual Tensor upload_as(const void* host, DType host_dtype, Shape shape, DType dtype) {
    Tensor t = alloc(dtype, std::move(shape));
    upload_into_as(t, host, host_dtype);
    return t;
  }
  // The same without conversion.
  Tensor upload(const void* host, DType dtype, Shape shape) { return upload_as(host, dtype, shape, dtype); }
  // Copies t.numel() elements of `host_dtype` from `host` (possibly unaligned) into the existing backend
  // tensor `t` (a whole tensor or a slice_rows() view), converting as upload_as() does, queued after the ops
  // before it. `host` may be reused as soon as the call returns. How weights reach a device: the CUDA backend
  // copies through pinned staging buffers without waiting for the transfer (only for a staging buffer's
  // previous transfer, when it needs the buffer again).
  virtual void upload_into_as(Tensor t, const void* host, DType host_dtype) = 0;
  // Copies t.nbytes() bytes from `host` into the existing backend tensor `t`, queued after the ops before
  // it and before those after it; `host` may be reused as soon as the call returns. Never synchronizes the
  // device, so it may feed a graph's inputs between replays.
  virtual void upload_into(Tensor t, const void* host) = 0;
  // Copies a backend tensor into host memory (`host` holds t.nbytes()).
  virtual void download(const Tensor& t, void* host) = 0;
  // The dtype weights (and the KV cache) are stored in after upload().
  virtual DType weight_dtype() const = 0;
  // The dtype of activations between ops (hidden states, q/k/v, MLP intermediates).
  virtual DType activation_dtype() const = 0;
  // Free and total bytes of the device's memory, or nullopt where memory is the host's (CPU).
  struct MemoryInfo {
    int64_t free = 0;
    int64_t total = 0;
  };
  virtual std::optional<MemoryInfo> memory_info() const { return std::nullopt; }
  // Whether quantize_fp8 / layer_norm_fp8 / matmul_fp8 are implemented (FP8 models can run).
  virtual bool supports_fp8() const { return false; }
  // Whether store_kv / rope_store_kv / attention / copy_blocks take FP8 KV storage (KvStorage::fp8) for
  // heads of head_dim values.
  virtual bool supports_fp8_kv(int64_t head_dim) const {
    (void)head_dim;
    return false;
  }
  // Throws tide::Error: `op` is not implemented by this backend.
  [[noreturn]] void unsupported(const char* op) const;
  // Makes the calling thread ready to issue this backend's ops (the CUDA backend selects its device, which is
  // per-thread state). Called by a thread other than the constructing one before its first op.
  virtual void bind_thread() {}

  // --- ops (out never aliases an input unless the contract says so) ---

  // out[t] = table[ids[t]].  out: [T, H], table: [V, H], ids: [T] i32 (checked against V).
  virtual void embedding(Tensor out, const Tensor& table, const Tensor& ids) = 0;
  // out[i] = x[rows[i]].  out: [R, H], x: [T, H], rows: [R] i32.
  virtual void gather_rows(Tensor out, const Tensor& x, const Tensor& rows) = 0;
  // LayerNorm without bias: out = w * (x - mean) / sqrt(var + eps).  x, out: [T, H] (may alias), w: [H].
  virtual void layer_norm(Tensor out, const Tensor& x, const Tensor& weight, float eps) = 0;
  // h = (h + a) + b, rounded as two add() calls, then out = layer_norm(h): the residual update ending one
  // parallel block and the next block's input norm, in one pass where the backend fuses them.
  // h, a, b, out: [T, H] (out aliases none of them), weight: [H].
  virtual void residual_layer_norm(Tensor h, const Tensor& a, const Tensor& b, Tensor out, const Tensor& weight,
                                   float eps) {
    add(h, h, a);
    add(h, h, b);
    layer_norm(out, h, weight, eps);
  }
  // out = alpha * x @ w^T.  out: [T, N] (activation dtype or F32), x: [T, K], w: [N, K].
  virtual void matmul(Tensor out, const Tensor& x, const Tensor& w, float alpha) = 0;
  // --- FP8 E4M3 (core/fp8.h: scale = amax / 448, q = e4m3(x / scale), round to nearest even, saturating) ---
  // Per-token quantization: scales[t] = scale_for_amax(max_k |x[t][k]|), out8[t][k] = quantize(x[t][k],
  // scales[t]). x: [T, K] (activation dtype, or F32), out8: [T, K] F8E4M3, scales: [T] F32; rows of any
  // length. Also the rowwise quantization of a weight [N, K] at load (one scale per output row): the same
  // codes and scales as fp8::quantize_row on the f32 values of each row, on every backend.
  virtual void quantize_fp8(Tensor out8, Tensor scales, const Tensor& x) {
    (void)out8, (void)scales, (void)x;
    unsupported("quantize_fp8");
  }
  // layer_norm() rounded to the activation dtype, then quantize_fp8(): the norm that feeds an FP8 matmul, in
  // one pass where the backend fuses them. `scratch`: [T, H] activation dtype, for backends that do not.
  virtual void layer_norm_fp8(Tensor out8, Tensor scales, const Tensor& x, const Tensor& weight, float eps,
                              Tensor scratch) {
    layer_norm(scratch, x, weight, eps);
    quantize_fp8(out8, scales, scratch);
  }
  // residual_layer_norm() with its output (rounded to the activation dtype) quantized per token instead.
  // h, a, b, scratch: [T, H], out8: [T, H] F8E4M3, scales: [T] F32.
  virtual void residual_layer_norm_fp8(Tensor h, const Tensor& a, const Tensor& b, Tensor out8, Tensor scales,
                                       const Tensor& weight, float eps, Tensor scratch) {
    residual_layer_norm(h, a, b, scratch, weight, eps);
    quantize_fp8(out8, scales, scratch);
  }
  // silu_mul() (rounded to the activation dtype), then quantize_fp8(): the activation that feeds an FP8 down
  // projection. gate_up: [T, 2I], out8: [T, I] F8E4M3, scales: [T] F32, scratch: [T, I] activation dtype.
  virtual void silu_mul_fp8(Tensor out8, Tensor scales, const Tensor& gate_up, Tensor scratch) {
    silu_mul(scratch, gate_up);
    quantize_fp8(out8, scales, scratch);
  }
  // out[t][n] = alpha * x_scales[t] * w_scales[n] * sum_k e4m3(x8[t][k]) * e4m3(w8[n][k]), products exact and
  // summed in f32. out: [T, N] (activation dtype or F32), x8: [T, K] F8E4M3, x_scales: [T] F32,
  // w8: [N, K] F8E4M3 (one scale per output row), w_scales: [N] F32.
  virtual void matmul_fp8(Tensor out, const Tensor& x8, const Tensor& x_scales, const Tensor& w8,
                          const Tensor& w_scales, float alpha) {
    (void)out, (void)x8, (void)x_scales, (void)w8, (void)w_scales, (void)alpha;
    unsupported("matmul_fp8");
  }

  // --- random values ---
  // t[i] = uniform_fill::value(seed, i, center, amplitude), rounded to t's dtype (F32, or the backend's weight
  // dtype): uniform in [center - amplitude, center + amplitude), the same values on every backend before the
  // rounding (uniform_fill.h); amplitude 0 fills with center exactly. Made where t lives (no host copy): the
  // weights of `--load-format dummy` and of the benchmark's synthetic model.
  virtual void fill_uniform(Tensor t, float center, float amplitude, uint64_t seed) = 0;

  // Interleaved (GPT-J) rotary embedding, in place, on heads [0, num_rope_heads) of each qkv row: the pair
  // (x[2j], x[2j+1]) of a token at position p turns by angle = f32(p) * inv_freq[j], computed in f32.
  // qkv: [T, num_heads_total * D], positions: [T] i32, inv_freq: [D / 2] f32.
  virtual void rope(Tensor qkv, const Tensor& positions, const Tensor& inv_freq, int64_t num_rope_heads) = 0;
  // Writes the k and v heads of each qkv row into layer `layer` of `kv` at slot_mapping[t]. A negative slot
  // marks a padding token: nothing is stored for it.
  virtual void store_kv(KvStorage& kv, int64_t layer, const Tensor& qkv, const Tensor& slot_mapping,
                        const AttentionShape& shape) = 0;
  // rope() on the q and k heads of qkv, then store_kv(): one pass over the rows where the backend fuses them.
  virtual void rope_store_kv(KvStorage& kv, int64_t layer, Tensor qkv, const Tensor& positions,
                             const Tensor& inv_freq, const Tensor& slot_mapping, const AttentionShape& shape) {
    rope(qkv, positions, inv_freq, shape.num_heads + shape.num_heads_kv);
    store_kv(kv, layer, qkv, slot_mapping, shape);
  }
  // Causal attention of each token's q heads over keys [max(0, p - window + 1), p] of its sequence
  // (window = kGlobalWindow: [0, p]), read from `kv` through the block tables; keys of the current batch
  // must already be stored. GQA: q head h reads kv head h / (num_heads / num_heads_kv). Scale D^-0.5.
  // out: [T, num_heads * D]. Never reads a block outside the window or a kNullBlock entry.
  virtual void attention(Tensor out, const Tensor& qkv, const KvStorage& kv, int64_t layer,
                         const AttentionBatch& batch, const AttentionShape& shape, int64_t window) = 0;
  // out = silu(gate) * up, where gate_up: [T, 2 * I] holds gate in [:, :I] and up in [:, I:]; out: [T, I].
  virtual void silu_mul(Tensor out, const Tensor& gate_up) = 0;
  // out = a + b, elementwise, same shapes; out may alias a or b.
  virtual void add(Tensor out, const Tensor& a, const Tensor& b) = 0;
  // out = x, byte for byte (same dtype and shape, any dtype; no aliasing): e.g. the model's logits kept for
  // the logprobs op before sample() penalizes them in place.
  virtual void copy(Tensor out, const Tensor& x) = 0;

  // --- sampling ---

  // Picks one token per row of `logits` and writes its id to out_ids[r]; never copies the logits to the host.
  // out_ids: [R] i32, logits: [R, V] f32 (overwritten with the biased, penalized logits). Per row, in this
  // order (sampling_math.h holds the arithmetic both backends share, so they compute the same bits):
  //   -1. a constrained row's tokens outside its mask: l = -inf (before the bias, so no bias revives them);
  //   0. bias on the listed tokens: l = l + bias (one rounded add; OpenAI logit_bias, -inf bans a token);
  //   1. penalties on the listed tokens: repetition (l / r if l > 0 else l * r, for tokens in prompt or
  //      output: prompt_count + output_count > 0), then l -= frequency * output_count + presence (tokens in
  //      the output: output_count > 0);
  //   2. temperature 0: greedy, the argmax (lowest id on ties; never a -inf token unless all are); done;
  //   3. top-k: keep tokens whose logit >= the k-th largest (ties at the boundary are all kept);
  //   4. top-p: with weights w = floor(2^40 * exp((l - l_max) / T)) over the tokens kept so far, keep the
  //      tokens whose logit >= the largest threshold t with mass(l >= t) >= ceil(top_p * mass) (ties kept);
  //   5. min-p: keep tokens with exp((l - l_max) / T) >= min_p (probability relative to the most likely);
  //   6. draw: x = floor(philox(seed, counter) * W / 2^64) for W the kept mass; the token is the lowest id
  //      whose cumulative kept weight, in vocabulary order, exceeds x.
  // Logits must not be NaN or +inf, before or after the bias (-inf is fine: weight 0, never kept by a filter
  // or drawn) and are compared as ordered bit keys (-0 < +0). A row whose every logit is -inf has no
  // distribution: it gives id 0 (the argmax's lowest id), whatever its temperature.
  // Weights are exact integers, so masses and prefix sums do not depend on summation order: the same batch
  // gives the same ids on every backend and run. A token whose relative probability is below 2^-40 has
  // weight 0 and is never drawn. Draws of a row depend only on its own (seed, counter), never on the other
  // rows of the batch.
  virtual void sample(Tensor out_ids, Tensor logits, const SamplingBatch& batch) = 0;
  // sample() whose rows may check a drafted token against the draft's distribution q (speculative sampling,
  // Leviathan et al. / Chen et al. 2023). A row without a draft is sample()'s. A row with one computes p, the
  // kept weights sample() would draw from (steps -1 .. 5; temperature 0: all weight on the argmax), and q, the
  // kept weights of the draft's row under its parameters (steps 3 .. 5), P = sum p, Q = sum q; then accepts the
  // draft d when u < (p[d] / P) / (q[d] / Q), both quotients and their ratio in f64 and u = (the top 53 bits of
  // philox(draft seed, draft counter)) * 2^-53, giving d; else it draws from the residual
  // r[x] = max(0, p[x] * Q - q[x] * P) (exact 128-bit integers) with the row's own (seed, counter) as step 6
  // does (x = floor(bits * R / 2^64) over R = sum r, in vocabulary order), or gives d when R is 0. The
  // accepted-or-residual token is distributed as p whatever q is, provided d was drawn from q. Backends
  // without it (supports_draft_sampling() false) throw.
  virtual bool supports_draft_sampling() const { return false; }
  virtual void sample_with_drafts(Tensor out_ids, Tensor logits, const SamplingBatch& batch, const DraftSampling& drafts);

  // Log-probabilities of the distribution in `logits` (log_softmax of each row, f32, the logits as given: call
  // it on the model's logits before sample() penalizes them in place): out_values[r][0] = logprob of
  // chosen_ids[r]; out_values[r][1 + j], out_ids[r][j] for j < n: the n most likely tokens, in descending
  // order (the lowest id first among equal logits). out_values: [R, 1 + n] f32, out_ids: [R, n] i32 (may be
  // [R, 0]), logits: [R, V] f32 (not modified), chosen_ids: [R] i32, all backend memory.
  // 0 <= n <= min(kMaxLogprobs, V).
  // Each value is logit - (max + log(sum exp(logit - max))), the sum accumulated in f64; a -inf logit has
  // logprob -inf. Logits must not be NaN or +inf; they are ordered as the sample op orders them (bit keys:
  // -0 below +0). A row whose every logit is -inf has no distribution: its values are NaN (its ids are
  // 0 .. n-1). A chosen id outside [0, V) throws tide::Error where the backend reads ids on the host (CPU);
  // a device backend (CUDA) writes NaN as its logprob instead and never reads outside the row.
  virtual void logprobs(Tensor out_values, Tensor out_ids, const Tensor& logits, const Tensor& chosen_ids,
                        int n) = 0;

  // --- KV host tier ---

  // Copies whole blocks between a group's device storage and its host tier ([host blocks, block bytes],
  // host memory), in the order given: an eviction to the host must land before a later copy reuses the
  // device block or the host slot.
  virtual void copy_blocks(KvStorage& device, Tensor& host, std::span<const BlockCopy> copies) = 0;

  // --- graphs ---

  // Ops recorded once and queued again by replay(), on the same tensors (whose contents may change between
  // replays: upload_into() feeds new inputs).
  class Graph {
   public:
    virtual ~Graph() = default;
    virtual void replay() = 0;
  };
  // --- two chains of one step at once ---
  // A parallel block has two independent chains after its input norm (qkv, attention and o; the MLP), which a
  // GPU can run side by side: the latency-bound attention kernels beside bandwidth-bound matmuls.
  // side_begin(): the ops that follow go to a second queue, which starts after everything queued so far.
  // side_end() (must not throw): the ops that follow go to the main queue again, which does not wait for the
  // second. side_join(): the main queue waits for everything given to the second queue. Ops on the second
  // queue must not allocate (a buffer freed on one queue and taken on the other would be shared by two
  // running kernels; the CUDA backend refuses). Backends without queues run everything in order.
  virtual void side_begin() {}
  virtual void side_end() {}
  virtual void side_join() {}

  // Records the ops that `body` queues, without running them, into a Graph; or returns null without calling
  // `body` where the backend does not record (the CPU). While recording, tensors come from a pool kept for
  // graphs: those that `body` keeps (captures by reference and holds afterwards) stay valid for every replay;
  // those it drops may be reused by other recordings, since graphs never run at the same time. `body` must
  // not upload, download or synchronize.
  virtual std::unique_ptr<Graph> capture(const std::function<void()>& body) {
    (void)body;
    return nullptr;
  }
};

}  // namespace tide
