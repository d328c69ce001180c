// Paged attention over the window-aware KV cache, the portable version: one block of 4 warps per
// (query token, query head); the warps take interleaved keys of the token's window [p - W + 1, p] (or
// [0, p]), each keeping an online softmax in f32, and merge at the end. Keys are read only through the
// block table and only inside the window, so released (null) blocks are never touched. CUDA cores, no
// tensor cores: the reference for the tensor-core prefill and split-KV decode kernels that replace it.
#include <cfloat>

#include "backend/cuda/kernels.h"

namespace tide::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kMaxPerLane = 8;  // head_dim <= 256

__global__ void __launch_bounds__(kWarps * 32) paged_attention_kernel(const __grid_constant__ PagedAttentionParams p) {
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t d = p.head_dim, kv_size = p.num_heads_kv * d;
  const int64_t kv_head = h / (p.num_heads / p.num_heads_kv);

  // The sequence of token t: the last s with seq_starts[s] <= t.
  int64_t lo_s = 0, hi_s = p.num_seqs - 1;
  while (lo_s < hi_s) {
    const int64_t mid = (lo_s + hi_s + 1) / 2;
    if (p.seq_starts[mid] <= t) lo_s = mid; else hi_s = mid - 1;
  }
  const int32_t* table = p.block_tables + lo_s * p.max_blocks;
  const int64_t pos = p.positions[t];
  const int64_t first = p.window == 0 ? 0 : max(int64_t{0}, pos - p.window + 1);

  const bf16* q = p.qkv + t * (p.num_heads + 2 * p.num_heads_kv) * d + h * d;
  float qr[kMaxPerLane], acc[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int64_t e = lane + 32 * i;
    qr[i] = e < d ? __bfloat162float(q[e]) * p.scale : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -FLT_MAX, l = 0.0f;
  for (int64_t key = first + warp; key <= pos; key += kWarps) {
    const int32_t block = table[key / p.block_size];
    if (block < 0 || block >= p.num_blocks) continue;  // never happens for a valid batch; never read it
    const int64_t base = ((block * p.num_layers + p.layer) * 2 * p.block_size + key % p.block_size) * kv_size + kv_head * d;
    const bf16* k = p.cache + base;
    const bf16* v = p.cache + base + p.block_size * kv_size;  // V follows K's block_size rows
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int64_t e = lane + 32 * i;
      if (e < d) dot += qr[i] * __bfloat162float(k[e]);
    }
    for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    const float m_new = fmaxf(m, dot);
    const float correction = __expf(m - m_new), weight = __expf(dot - m_new);
    l = l * correction + weight;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int64_t e = lane + 32 * i;
      acc[i] = acc[i] * correction + (e < d ? weight * __bfloat162float(v[e]) : 0.0f);
    }
    m = m_new;
  }

  // Merge the warps' partial softmaxes.
  __shared__ float s_m[kWarps], s_l[kWarps];
  __shared__ float s_acc[kWarps][kMaxPerLane * 32];
  if (lane == 0) {
    s_m[warp] = m;
    s_l[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) s_acc[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  float m_all = -FLT_MAX;
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, s_m[w]);
  float l_all = 0.0f;
  for (int w = 0; w < kWarps; ++w) l_all += s_l[w] * __expf(s_m[w] - m_all);
  bf16* out = p.out + t * p.num_heads * d + h * d;
  for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < kWarps; ++w) o += s_acc[w][e] * __expf(s_m[w] - m_all);
    out[e] = __float2bfloat16(o / l_all);
  }
}

}  // namespace

void launch_paged_attention(const PagedAttentionParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads));
  paged_attention_kernel<<<grid, kWarps * 32, 0, stream>>>(p);
}

}  // namespace tide::cuda
