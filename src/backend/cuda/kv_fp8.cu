// The FP8 KV store alone (store_kv with --kv-cache-dtype fp8; the forward pass stores fused with RoPE,
// elementwise.cu): kv_fp8.cuh's store of each token. And the dequantization of the blocks a prefill attention
// launch reads into bf16 scratch, which lets prefill over an FP8 cache run on the bf16 kernels.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cub/block/block_reduce.cuh>

#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/prefill_tiling.h"
#include "core/error.h"

namespace tide::cuda {
namespace {

constexpr int kWarps = 8;

// One CTA per token.
__global__ void __launch_bounds__(32 * kWarps)
    store_kv_fp8_kernel(uint8_t* __restrict__ codes, float* __restrict__ scales, const bf16* __restrict__ qkv,
                        const int64_t* __restrict__ slot_mapping, int64_t row_size, int64_t q_size,
                        int64_t num_heads_kv, int64_t head_dim, int64_t num_layers, int64_t layer,
                        int64_t block_size) {
  begin_dependent_kernel();
  const int64_t t = blockIdx.x, slot = slot_mapping[t];
  if (slot < 0) return;  // padding
  store_token_kv_fp8(codes, scales, qkv + t * row_size + q_size, slot, num_heads_kv, head_dim, num_layers, layer,
                     block_size, static_cast<int>(threadIdx.x) / 32, kWarps, static_cast<int>(threadIdx.x) % 32);
}

constexpr int kDequantThreads = 256;
// 16-byte chunks of codes per thread, all loaded before any is converted: a CTA keeps 16 KB in flight.
constexpr int kDequantChunks = 4;
constexpr int64_t kDequantPieceBytes = 16 * kDequantThreads * kDequantChunks;

// CTA (x, y) serves piece x % pieces of the y-th listed sequence's key blocks' column first + x / pieces
// (prefill_key_blocks; a piece: kDequantPieceBytes of the block's codes of the layer, its K rows then its V
// rows). A column that holds a block gets the next scratch block after those of the listed sequences before
// it, and its pieces dequantized there; every other column of the sequence's row of `tables` gets kNullBlock
// (-1), those outside its key blocks written by the CTAs in turn. gridDim.x: the host's bound on a sequence's
// key blocks times the pieces.
__global__ void __launch_bounds__(kDequantThreads)
    kv_dequantize_kernel(const __grid_constant__ PagedAttentionParams p, bf16* __restrict__ scratch,
                         int64_t scratch_blocks, int32_t* __restrict__ tables, int pieces) {
  begin_dependent_kernel();
  using Reduce = cub::BlockReduce<int, kDequantThreads>;
  __shared__ typename Reduce::TempStorage reduce;
  __shared__ int first_scratch;
  const int listed = static_cast<int>(blockIdx.y), tid = static_cast<int>(threadIdx.x);
  const int block_size = static_cast<int>(p.block_size), window = static_cast<int>(p.window);
  const auto key_blocks = [&](int i) {
    const int s = p.seq_list != nullptr ? p.seq_list[i] : i;
    const int t0 = p.seq_starts[s], t1 = p.seq_starts[s + 1];
    return t1 > t0 ? prefill_key_blocks(p.positions[t0], p.positions[t1 - 1], window, block_size) : KeyBlocks{0, -1};
  };
  int before = 0;  // the columns of the listed sequences before this one
  for (int i = tid; i < listed; i += kDequantThreads) {
    const KeyBlocks kb = key_blocks(i);
    before += kb.last - kb.first + 1;
  }
  before = Reduce(reduce).Sum(before);
  if (tid == 0) first_scratch = before;
  __syncthreads();
  const int64_t seq = p.seq_list != nullptr ? p.seq_list[listed] : listed;
  const KeyBlocks kb = key_blocks(listed);
  int32_t* row = tables + seq * p.max_blocks;
  for (int64_t col = blockIdx.x + int64_t{gridDim.x} * tid; col < p.max_blocks;
       col += int64_t{gridDim.x} * kDequantThreads) {
    if (col < kb.first || col > kb.last) row[col] = -1;
  }
  const int c = kb.first + static_cast<int>(blockIdx.x) / pieces, piece = static_cast<int>(blockIdx.x) % pieces;
  if (c > kb.last) return;
  const int32_t block = p.block_tables[seq * p.max_blocks + c];
  const int64_t to = first_scratch + c - kb.first;
  // (The host sizes the scratch for every listed sequence's columns: `to` is always inside it.)
  const bool copy = block >= 0 && to < scratch_blocks;
  if (piece == 0 && tid == 0) row[c] = copy ? static_cast<int32_t>(to) : -1;
  if (!copy) return;
  // The block's K rows of the layer, then its V rows: codes [kv][offset][head][d], scales [kv][head][offset].
  // A block's values of the layer: as many one-byte codes in the cache as bf16 values in its scratch block.
  const int64_t kv_size = p.num_heads_kv * p.head_dim, block_values = 2 * p.block_size * kv_size;
  const int64_t layer_kv = (int64_t{block} * p.num_layers + p.layer) * 2;
  const uint8_t* src = p.cache8 + layer_kv * p.block_size * kv_size;
  bf16* dst = scratch + to * block_values;
  const int64_t e0 = piece * kDequantPieceBytes + 16 * tid;
  uint4 codes[kDequantChunks];
  float scales[kDequantChunks];
#pragma unroll
  for (int j = 0; j < kDequantChunks; ++j) {
    const int64_t e = e0 + j * 16 * kDequantThreads;
    if (e >= block_values) break;
    const int64_t row = e / kv_size;  // kv * block_size + offset
    const int64_t kv = row / p.block_size, offset = row % p.block_size, head = e % kv_size / p.head_dim;
    codes[j] = *reinterpret_cast<const uint4*>(src + e);
    scales[j] = p.scales[((layer_kv + kv) * p.num_heads_kv + head) * p.block_size + offset];
  }
#pragma unroll
  for (int j = 0; j < kDequantChunks; ++j) {
    const int64_t e = e0 + j * 16 * kDequantThreads;
    if (e >= block_values) break;
    const uint32_t words[4] = {codes[j].x, codes[j].y, codes[j].z, codes[j].w};
    uint32_t out[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(words[i / 2] >> (16 * (i % 2)));
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      const __nv_bfloat162 b = __floats2bfloat162_rn(f.x * scales[j], f.y * scales[j]);
      out[i] = *reinterpret_cast<const uint32_t*>(&b);
    }
    uint4* d = reinterpret_cast<uint4*>(dst + e);
    d[0] = make_uint4(out[0], out[1], out[2], out[3]);
    d[1] = make_uint4(out[4], out[5], out[6], out[7]);
  }
}

}  // namespace

int64_t kv_dequantize_scratch_blocks(const PagedAttentionParams& p, int64_t max_position, int64_t max_seq_tokens) {
  return p.num_seqs * prefill_key_blocks_bound(max_position, max_seq_tokens, p.window, p.block_size);
}

void launch_kv_dequantize_for_prefill(const PagedAttentionParams& p, int64_t max_position, int64_t max_seq_tokens,
                                      bf16* scratch, int64_t scratch_blocks, int32_t* tables, cudaStream_t stream) {
  if (p.num_seqs == 0 || p.max_blocks == 0) return;
  const int64_t block_values = 2 * p.block_size * p.num_heads_kv * p.head_dim;
  const int64_t pieces = (block_values + kDequantPieceBytes - 1) / kDequantPieceBytes;
  const int64_t columns = prefill_key_blocks_bound(max_position, max_seq_tokens, p.window, p.block_size);
  TIDE_CHECK(p.head_dim % 16 == 0 && p.num_seqs <= 65535 && columns * pieces < (int64_t{1} << 31) &&
             scratch_blocks >= p.num_seqs * columns);
  const dim3 grid(static_cast<unsigned>(columns * pieces), static_cast<unsigned>(p.num_seqs));
  launch_kernel(kv_dequantize_kernel, grid, kDequantThreads, 0, stream, p, scratch, scratch_blocks, tables,
                static_cast<int>(pieces));
}

void launch_store_kv_fp8(const KvStoreParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const int64_t q_size = p.num_heads * p.head_dim, row_size = q_size + 2 * p.num_heads_kv * p.head_dim;
  launch_kernel(store_kv_fp8_kernel, static_cast<unsigned>(p.num_tokens), 32 * kWarps, 0, stream, p.codes, p.scales,
                p.qkv, p.slot_mapping, row_size, q_size, p.num_heads_kv, p.head_dim, p.num_layers, p.layer,
                p.block_size);
}

}  // namespace tide::cuda
