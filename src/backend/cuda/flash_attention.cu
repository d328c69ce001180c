// Prefill / chunked-prefill attention on tensor cores (WMMA, bf16 in, f32 accumulate), FlashAttention-2
// style over the paged, window-aware KV cache. A block of 4 warps serves 64 consecutive new tokens of one
// sequence and one query head; each warp owns 16 of the rows. Key tiles of 64 (staged in shared memory
// through the block table) are scored with S = Q K^T on tensor cores; the online softmax runs on S in
// shared memory (two lanes per row), P = exp(S - m) goes back as bf16 and O += P V on tensor cores, with O
// kept in shared memory so rows can be rescaled. Key tiles wholly outside every row's window are skipped;
// keys outside a row's window or beyond its position are masked; null blocks are never read.
#include <mma.h>

#include <cfloat>

#include "backend/cuda/kernels.h"

namespace tide::cuda {
namespace {

using namespace nvcuda;

constexpr int kWarps = 4;
constexpr int kRows = 16 * kWarps;  // query rows per block
constexpr int kKeys = 64;           // keys per tile

struct FlashParams {
  PagedAttentionParams p;
  int64_t tiles_per_seq;
};

size_t smem_bytes(int64_t d) {
  return static_cast<size_t>(2 * kKeys * d * 2          // K, V tiles (bf16)
                             + kRows * d * 2             // Q (bf16)
                             + kRows * kKeys * 4         // S (f32)
                             + kRows * kKeys * 2         // P (bf16)
                             + kRows * d * 4);           // O (f32)
}

__global__ void __launch_bounds__(kWarps * 32) flash_attention_kernel(const __grid_constant__ FlashParams fp) {
  const PagedAttentionParams& p = fp.p;
  const int64_t seq = blockIdx.x / fp.tiles_per_seq, tile = blockIdx.x % fp.tiles_per_seq, h = blockIdx.y;
  const int64_t seq_begin = p.seq_starts[seq], seq_tokens = p.seq_starts[seq + 1] - seq_begin;
  const int64_t row0 = tile * kRows;
  if (row0 >= seq_tokens) return;
  const int64_t rows = min(int64_t{kRows}, seq_tokens - row0);
  const int64_t d = p.head_dim, kv_size = p.num_heads_kv * d, kv_head = h / (p.num_heads / p.num_heads_kv);
  const int64_t row_size = (p.num_heads + 2 * p.num_heads_kv) * d;
  const int32_t* table = p.block_tables + seq * p.max_blocks;
  const int64_t pos_first = p.positions[seq_begin + row0];  // positions of a sequence's new tokens are consecutive
  const int64_t pos_last = pos_first + rows - 1;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* k_s = reinterpret_cast<bf16*>(smem_raw);
  bf16* v_s = k_s + kKeys * d;
  bf16* q_s = v_s + kKeys * d;
  float* s_s = reinterpret_cast<float*>(q_s + kRows * d);
  bf16* p_s = reinterpret_cast<bf16*>(s_s + kRows * kKeys);
  float* o_s = reinterpret_cast<float*>(p_s + kRows * kKeys);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  for (int64_t i = threadIdx.x; i < kRows * d; i += blockDim.x) {
    const int64_t r = i / d, e = i % d;
    q_s[i] = r < rows ? p.qkv[(seq_begin + row0 + r) * row_size + h * d + e] : __float2bfloat16(0.0f);
    o_s[i] = 0.0f;
  }
  // Two lanes per row: lane/2 is the warp's row, lane%2 the half of the key tile (and of O's columns).
  const int my_row = warp * 16 + lane / 2, half = lane % 2;
  const int64_t my_pos = pos_first + my_row;
  float m = -FLT_MAX, l = 0.0f;

  const int64_t key_lo = p.window == 0 ? 0 : max(int64_t{0}, pos_first - p.window + 1);
  for (int64_t kbase = key_lo; kbase <= pos_last; kbase += kKeys) {
    __syncthreads();  // the previous tile's K/V (and, first, Q and O) are complete / no longer read
    for (int64_t i = threadIdx.x; i < kKeys * d / 8; i += blockDim.x) {
      const int64_t r = i / (d / 8), e = (i % (d / 8)) * 8, key = kbase + r;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
      if (key <= pos_last) {
        const int32_t block = table[key / p.block_size];
        if (block >= 0 && block < p.num_blocks) {
          const bf16* kp = p.cache + ((block * p.num_layers + p.layer) * 2 * p.block_size + key % p.block_size) * kv_size + kv_head * d + e;
          kv = *reinterpret_cast<const uint4*>(kp);
          vv = *reinterpret_cast<const uint4*>(kp + p.block_size * kv_size);
        }
      }
      *reinterpret_cast<uint4*>(k_s + r * d + e) = kv;
      *reinterpret_cast<uint4*>(v_s + r * d + e) = vv;
    }
    __syncthreads();

    // S[16 x 64] = Q[16 x d] K^T for this warp's rows.
    float* s_w = s_s + warp * 16 * kKeys;
    for (int n = 0; n < kKeys / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int64_t k = 0; k < d; k += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
        wmma::load_matrix_sync(a, q_s + warp * 16 * d + k, static_cast<unsigned>(d));
        wmma::load_matrix_sync(b, k_s + n * 16 * d + k, static_cast<unsigned>(d));
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(s_w + n * 16, acc, kKeys, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax of this lane's half row; P = exp(S - m_new) as bf16; O rows rescaled.
    float* s_row = s_w + (lane / 2) * kKeys + half * 32;
    float tile_max = -FLT_MAX;
    for (int c = 0; c < 32; ++c) {
      const int64_t key = kbase + half * 32 + c;
      const bool visible = my_row < rows && key <= my_pos && (p.window == 0 || key > my_pos - p.window);
      const float s = visible ? s_row[c] * p.scale : -FLT_MAX;
      s_row[c] = s;
      tile_max = fmaxf(tile_max, s);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    float sum = 0.0f;
    bf16* p_row = p_s + (warp * 16 + lane / 2) * kKeys + half * 32;
    for (int c = 0; c < 32; ++c) {
      const float e = s_row[c] == -FLT_MAX ? 0.0f : __expf(s_row[c] - m_new);
      sum += e;
      p_row[c] = __float2bfloat16(e);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    const float correction = m == -FLT_MAX ? 0.0f : __expf(m - m_new);
    l = l * correction + sum;
    m = m_new;
    float* o_row = o_s + (warp * 16 + lane / 2) * d;
    for (int64_t e = half; e < d; e += 2) o_row[e] *= correction;
    __syncwarp();

    // O[16 x d] += P[16 x 64] V[64 x d].
    for (int64_t n = 0; n < d; n += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, o_s + warp * 16 * d + n, static_cast<unsigned>(d), wmma::mem_row_major);
      for (int k = 0; k < kKeys; k += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
        wmma::load_matrix_sync(a, p_s + warp * 16 * kKeys + k, kKeys);
        wmma::load_matrix_sync(b, v_s + k * d + n, static_cast<unsigned>(d));
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(o_s + warp * 16 * d + n, acc, static_cast<unsigned>(d), wmma::mem_row_major);
    }
    __syncwarp();
  }

  if (my_row < rows) {
    const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
    bf16* out = p.out + (seq_begin + row0 + my_row) * p.num_heads * d + h * d;
    const float* o_row = o_s + my_row * d;
    for (int64_t e = half; e < d; e += 2) out[e] = __float2bfloat16(o_row[e] * inv_l);
  }
}

}  // namespace

bool flash_attention_supports(int64_t head_dim) { return head_dim % 16 == 0 && head_dim <= 256; }

void launch_flash_attention(const PagedAttentionParams& p, int64_t max_seq_tokens, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const int64_t tiles = (max_seq_tokens + kRows - 1) / kRows;
  const FlashParams fp{p, tiles};
  const size_t smem = smem_bytes(p.head_dim);
  cudaFuncSetAttribute(flash_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  const dim3 grid(static_cast<unsigned>(p.num_seqs * tiles), static_cast<unsigned>(p.num_heads));
  flash_attention_kernel<<<grid, kWarps * 32, smem, stream>>>(fp);
}

}  // namespace tide::cuda
