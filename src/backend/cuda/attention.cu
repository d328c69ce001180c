// Paged attention over the window-aware KV cache, split over keys (flash-decoding style). A block serves one
// query token and one KV head with all the query heads that share it (GQA), over one split of the token's
// keys [p - W + 1, p] (or [0, p]): tiles of 32 keys are staged in shared memory; each warp owns some of the
// query heads, scores a tile with one key per lane, keeps an online softmax in f32 and accumulates V with
// one output dimension per lane. A second kernel merges the splits. Keys are read only through the block
// table and only inside the window, so released (null) blocks are never touched. CUDA cores: the generic path
// for head_dims the tensor-core kernels (prefill_attention.cuh, decode_attention.cuh) do not instantiate.
#include <cfloat>

#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace tide::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kTile = 32;          // keys per shared-memory tile: one per lane when scoring
constexpr int kMaxDimPerLane = 8;  // head_dim <= 256
constexpr int kMaxHeadsPerWarp = 4;  // query heads per KV head <= 16

struct SplitParams {
  PagedAttentionParams p;
  float* part_out;  // [T, Hq, splits, D]
  float* part_ml;   // [T, Hq, splits, 2]: running max, sum of exp
  int num_splits;
};

__device__ int64_t sequence_of(const int32_t* seq_starts, int64_t num_seqs, int64_t t) {
  int64_t lo = 0, hi = num_seqs - 1;  // the last s with seq_starts[s] <= t
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (seq_starts[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__global__ void __launch_bounds__(kWarps * 32) split_attention_kernel(const __grid_constant__ SplitParams sp) {
  begin_dependent_kernel();
  const PagedAttentionParams& p = sp.p;
  extern __shared__ float smem[];
  const int64_t t = blockIdx.x, kv_head = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t d = p.head_dim, kv_size = p.num_heads_kv * d, group = p.num_heads / p.num_heads_kv;
  const int64_t row_stride = d + 1;  // padded rows: lane-per-key reads hit distinct banks
  float* k_tile = smem;                          // [kTile][d + 1]
  float* v_tile = k_tile + kTile * row_stride;   // [kTile][d + 1]
  float* q_s = v_tile + kTile * row_stride;      // [group][d], pre-scaled

  const int32_t* table = p.block_tables + sequence_of(p.seq_starts, p.num_seqs, t) * p.max_blocks;
  const int64_t pos = p.positions[t];
  const int64_t first = p.window == 0 ? 0 : max(int64_t{0}, pos - p.window + 1);
  const int64_t len = pos - first + 1;
  const int64_t per_split = (len + sp.num_splits - 1) / sp.num_splits;
  const int64_t lo = first + split * per_split, hi = min(pos + 1, lo + per_split);  // keys [lo, hi)

  const bf16* q = p.qkv + t * (p.num_heads + 2 * p.num_heads_kv) * d + kv_head * group * d;
  for (int64_t i = threadIdx.x; i < group * d; i += blockDim.x) q_s[i] = __bfloat162float(q[i]) * p.scale;

  float m[kMaxHeadsPerWarp], l[kMaxHeadsPerWarp], acc[kMaxHeadsPerWarp][kMaxDimPerLane];
#pragma unroll
  for (int j = 0; j < kMaxHeadsPerWarp; ++j) {
    m[j] = -FLT_MAX;
    l[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxDimPerLane; ++i) acc[j][i] = 0.0f;
  }

  for (int64_t base = lo; base < hi; base += kTile) {
    __syncthreads();  // the previous tile (and q_s on the first pass) is complete / no longer read
    // Each thread moves `vec` consecutive elements of one key row (16-byte loads when head_dim allows).
    const int64_t vec = d % 8 == 0 ? 8 : 1;
    for (int64_t i = threadIdx.x; i < kTile * d / vec; i += blockDim.x) {
      const int64_t r = i / (d / vec), e = (i % (d / vec)) * vec, key = base + r;
      float k_vals[8] = {}, v_vals[8] = {};
      if (key < hi) {
        const int32_t block = table[key / p.block_size];
        if (block >= 0 && block < p.num_blocks) {
          const bf16* kp = p.cache + ((block * p.num_layers + p.layer) * 2 * p.block_size + key % p.block_size) * kv_size + kv_head * d + e;
          const bf16* vp = kp + p.block_size * kv_size;  // V follows K's block_size rows
          if (vec == 8) {
            const uint4 kraw = *reinterpret_cast<const uint4*>(kp), vraw = *reinterpret_cast<const uint4*>(vp);
            const __nv_bfloat162* k2 = reinterpret_cast<const __nv_bfloat162*>(&kraw);
            const __nv_bfloat162* v2 = reinterpret_cast<const __nv_bfloat162*>(&vraw);
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const float2 kf = __bfloat1622float2(k2[j]), vf = __bfloat1622float2(v2[j]);
              k_vals[2 * j] = kf.x;
              k_vals[2 * j + 1] = kf.y;
              v_vals[2 * j] = vf.x;
              v_vals[2 * j + 1] = vf.y;
            }
          } else {
            k_vals[0] = __bfloat162float(kp[0]);
            v_vals[0] = __bfloat162float(vp[0]);
          }
        }
      }
      for (int64_t j = 0; j < vec; ++j) {
        k_tile[r * row_stride + e + j] = k_vals[j];
        v_tile[r * row_stride + e + j] = v_vals[j];
      }
    }
    __syncthreads();
    const bool valid = base + lane < hi;
#pragma unroll
    for (int j = 0; j < kMaxHeadsPerWarp; ++j) {
      const int64_t h = warp + j * kWarps;
      if (h >= group) break;
      float score = -FLT_MAX;
      if (valid) {
        score = 0.0f;
        for (int64_t e = 0; e < d; ++e) score += q_s[h * d + e] * k_tile[lane * row_stride + e];
      }
      float tile_max = score;
      for (int o = 16; o > 0; o /= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
      const float m_new = fmaxf(m[j], tile_max);
      const float weight = valid ? __expf(score - m_new) : 0.0f;
      float tile_sum = weight;
      for (int o = 16; o > 0; o /= 2) tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, o);
      const float correction = __expf(m[j] - m_new);
      l[j] = l[j] * correction + tile_sum;
      m[j] = m_new;
#pragma unroll
      for (int i = 0; i < kMaxDimPerLane; ++i) acc[j][i] *= correction;
      for (int r = 0; r < kTile; ++r) {
        const float w = __shfl_sync(0xffffffffu, weight, r);
#pragma unroll
        for (int i = 0; i < kMaxDimPerLane; ++i) {
          const int64_t e = lane + 32 * i;
          if (e < d) acc[j][i] += w * v_tile[r * row_stride + e];
        }
      }
    }
  }

#pragma unroll
  for (int j = 0; j < kMaxHeadsPerWarp; ++j) {
    const int64_t h = warp + j * kWarps;
    if (h >= group) break;
    const int64_t head = kv_head * group + h;
    const int64_t slot = (t * p.num_heads + head) * sp.num_splits + split;
#pragma unroll
    for (int i = 0; i < kMaxDimPerLane; ++i) {
      const int64_t e = lane + 32 * i;
      if (e < d) sp.part_out[slot * d + e] = acc[j][i];
    }
    if (lane == 0) {
      sp.part_ml[slot * 2] = m[j];
      sp.part_ml[slot * 2 + 1] = l[j];
    }
  }
}

// Merges the splits of one (token, head): out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.
__global__ void merge_splits_kernel(const __grid_constant__ SplitParams sp) {
  begin_dependent_kernel();
  const PagedAttentionParams& p = sp.p;
  const int64_t t = blockIdx.x, h = blockIdx.y, d = p.head_dim;
  const int64_t first_slot = (t * p.num_heads + h) * sp.num_splits;
  float m_all = -FLT_MAX;
  for (int s = 0; s < sp.num_splits; ++s) m_all = fmaxf(m_all, sp.part_ml[(first_slot + s) * 2]);
  float l_all = 0.0f;
  for (int s = 0; s < sp.num_splits; ++s) {
    l_all += sp.part_ml[(first_slot + s) * 2 + 1] * __expf(sp.part_ml[(first_slot + s) * 2] - m_all);
  }
  for (int64_t e = threadIdx.x; e < d; e += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < sp.num_splits; ++s) {
      o += sp.part_out[(first_slot + s) * d + e] * __expf(sp.part_ml[(first_slot + s) * 2] - m_all);
    }
    p.out[(t * p.num_heads + h) * d + e] = __float2bfloat16(o / l_all);
  }
}

}  // namespace

int paged_attention_splits(int64_t num_tokens, int64_t num_heads_kv, int64_t max_keys, int num_sms) {
  // About 8 blocks per SM, so that enough loads are in flight to hide memory latency (a block holds ~35 KB
  // of shared memory, 4 warps), but no split shorter than one tile (measured on the H200: more, shorter
  // splits beat fewer, longer ones at batch 1); one split when the tokens alone fill the GPU (prefill).
  constexpr int64_t kMinKeysPerSplit = kTile;
  const int64_t blocks = num_tokens * num_heads_kv;
  const int64_t splits = std::min((8 * num_sms + blocks - 1) / blocks, (max_keys + kMinKeysPerSplit - 1) / kMinKeysPerSplit);
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(splits, 128)));
}

size_t paged_attention_smem_bytes(int64_t head_dim, int64_t group) {
  return sizeof(float) * static_cast<size_t>(2 * kTile * (head_dim + 1) + group * head_dim);
}

bool paged_attention_supports(int64_t head_dim, int64_t group) {
  return head_dim <= 32 * kMaxDimPerLane && group <= kWarps * kMaxHeadsPerWarp;
}

void launch_paged_attention(const PagedAttentionParams& p, float* part_out, float* part_ml, int num_splits,
                            cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const SplitParams sp{p, part_out, part_ml, num_splits};
  const size_t smem = paged_attention_smem_bytes(p.head_dim, p.num_heads / p.num_heads_kv);
  if (smem > 48 * 1024) {
    cudaFuncSetAttribute(split_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  }
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads_kv), static_cast<unsigned>(num_splits));
  launch_kernel(split_attention_kernel, grid, kWarps * 32, smem, stream, sp);
  const dim3 merge_grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads));
  launch_kernel(merge_splits_kernel, merge_grid, 128, 0, stream, sp);
}

}  // namespace tide::cuda
