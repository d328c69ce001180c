// Memory-bound CUDA kernels of the backend: embedding and row gathers, RoPE, the KV store (alone and fused
// with RoPE: the forward pass uses the fused one), SiLU-multiply and add. One pass each.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/activation.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/launch.cuh"

namespace tide::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>((n + kThreads - 1) / kThreads); }

__global__ void copy_rows_kernel(bf16* out, const bf16* src, const int32_t* index, int64_t hidden) {
  begin_dependent_kernel();
  const int64_t row = blockIdx.x;
  const bf16* from = src + static_cast<int64_t>(index[row]) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) out[row * hidden + i] = from[i];
}

// A pair (x0, x1) rotated by (c, s), each component as one FMA onto a rounded product: x0 c - x1 s as
// fma(x0, c, -round(x1 s)), x1 c + x0 s as fma(x0, s, round(x1 c)). Written out so that every path of the
// kernel rounds alike: from PTX's plain mul and sub, ptxas may fuse either product, and chose differently in
// two loops of one kernel (which changed a greedy id in the GPU tests). This is the rounding the kernel's
// one-pair-per-thread form compiled to before, checked bit for bit on an H100.
__device__ __forceinline__ __nv_bfloat162 rotate_pair(float2 x, float2 cs) {
  return __floats2bfloat162_rn(__fmaf_rn(x.x, cs.x, -__fmul_rn(x.y, cs.y)),
                               __fmaf_rn(x.x, cs.y, __fmul_rn(x.y, cs.x)));
}

__global__ void rope_kernel(bf16* qkv, const int32_t* positions, const float* inv_freq, int64_t row_size,
                            int64_t num_rope_heads, int64_t head_dim) {
  begin_dependent_kernel();
  const int64_t t = blockIdx.x;
  const int64_t half = head_dim / 2;
  const float pos = static_cast<float>(positions[t]);
  bf16* row = qkv + t * row_size;
  for (int64_t i = threadIdx.x; i < num_rope_heads * half; i += blockDim.x) {
    const int64_t h = i / half, j = i % half;
    float s, c;
    sincosf(pos * inv_freq[j], &s, &c);  // f32 angle, as the reference computes it
    bf16* pair = row + h * head_dim + 2 * j;
    const __nv_bfloat162 y = rotate_pair(make_float2(__bfloat162float(pair[0]), __bfloat162float(pair[1])),
                                         make_float2(c, s));
    pair[0] = y.x;
    pair[1] = y.y;
  }
}

__global__ void store_kv_kernel(bf16* cache, const bf16* qkv, const int64_t* slot_mapping, int64_t row_size,
                                int64_t q_size, int64_t kv_size, int64_t num_layers, int64_t layer,
                                int64_t block_size) {
  begin_dependent_kernel();
  const int64_t t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  if (slot < 0) return;  // padding
  const int64_t block = slot / block_size, offset = slot % block_size;
  const bf16* k = qkv + t * row_size + q_size;  // V follows K in the qkv row
  bf16* k_dst = cache + ((block * num_layers + layer) * 2 * block_size + offset) * kv_size;
  bf16* v_dst = k_dst + block_size * kv_size;  // V's block_size rows follow K's
  const int n = static_cast<int>(kv_size);
  if (n % 8 == 0 && reinterpret_cast<uintptr_t>(k) % 16 == 0 && reinterpret_cast<uintptr_t>(k_dst) % 16 == 0) {
    for (int i = static_cast<int>(threadIdx.x); i < n / 4; i += blockDim.x) {  // 16-byte chunks of K, then V
      const bool is_k = i < n / 8;
      reinterpret_cast<uint4*>(is_k ? k_dst : v_dst)[is_k ? i : i - n / 8] = reinterpret_cast<const uint4*>(k)[i];
    }
  } else {
    for (int i = static_cast<int>(threadIdx.x); i < 2 * n; i += blockDim.x) (i < n ? k_dst : v_dst)[i % n] = k[i];
  }
}

// One block per token: the token's cos/sin table first (one sincosf per frequency, shared by all heads), then
// every q and k pair rotated in place, the rotated k and the v heads written to the cache. kFp8: after a
// barrier, the rotated k and the v heads quantized into the FP8 cache (store_token_kv_fp8). kVec (head_dim a
// multiple of 8 dividing 8 kThreads, 16-byte aligned rows): each thread takes 4 pairs (16 bytes) at a time,
// always the same 4 of a head (the block's stride is a multiple of a head's pairs), so it reads their cos / sin
// once, and indexes with 32-bit arithmetic.
template <bool kFp8, bool kVec>
__global__ void rope_store_kv_kernel(const __grid_constant__ KvStoreParams p) {
  extern __shared__ float2 cos_sin[];  // [D / 2]
  const int64_t t = blockIdx.x, half = p.head_dim / 2, d = p.head_dim;
  const int64_t q_size = p.num_heads * d, kv_size = p.num_heads_kv * d;
  // Positions, slots and frequencies are the step's inputs, which no kernel writes: read (and the table
  // computed) while the kernel before still runs; qkv and the cache only after the wait (launch.cuh).
  const float pos = static_cast<float>(p.positions[t]);
  for (int64_t j = threadIdx.x; j < half; j += blockDim.x) {
    float s, c;
    sincosf(pos * p.inv_freq[j], &s, &c);  // f32 angle, as the reference computes it
    cos_sin[j] = make_float2(c, s);
  }
  const int64_t slot = p.slot_mapping[t];
  begin_dependent_kernel();
  __syncthreads();
  bf16* row = p.qkv + t * (q_size + 2 * kv_size);
  bf16* k_dst = slot < 0 || kFp8 ? nullptr
                                 : p.cache + ((slot / p.block_size * p.num_layers + p.layer) * 2 * p.block_size +
                                              slot % p.block_size) * kv_size;
  const int64_t num_pairs = (p.num_heads + p.num_heads_kv) * half;
  if constexpr (kVec) {
    const int j = static_cast<int>((4 * threadIdx.x) % half);  // the thread's first pair in a head
    const float2 cs[4] = {cos_sin[j], cos_sin[j + 1], cos_sin[j + 2], cos_sin[j + 3]};
    const int chunks = static_cast<int>(num_pairs / 4), q_chunks = static_cast<int>(q_size / 8);
#pragma unroll 4
    for (int i = static_cast<int>(threadIdx.x); i < chunks; i += kThreads) {
      uint4 v = reinterpret_cast<const uint4*>(row)[i];
      auto* x = reinterpret_cast<__nv_bfloat162*>(&v);
#pragma unroll
      for (int e = 0; e < 4; ++e) x[e] = rotate_pair(__bfloat1622float2(x[e]), cs[e]);
      reinterpret_cast<uint4*>(row)[i] = v;
      if (k_dst && i >= q_chunks) reinterpret_cast<uint4*>(k_dst)[i - q_chunks] = v;
    }
  } else {
    // Unrolled so that several pairs' loads are in flight at once: at decode sizes this one block per token
    // waits on memory latency, not bandwidth.
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < num_pairs; i += blockDim.x) {
      const float2 cs = cos_sin[i % half];
      __nv_bfloat162* pair = reinterpret_cast<__nv_bfloat162*>(row) + i;
      const float2 x = __bfloat1622float2(*pair);
      const __nv_bfloat162 y = rotate_pair(x, cs);
      *pair = y;
      if (k_dst && 2 * i >= q_size) reinterpret_cast<__nv_bfloat162*>(k_dst)[i - q_size / 2] = y;
    }
  }
  if constexpr (kFp8) {
    if (slot < 0) return;  // padding (uniform over the block)
    __syncthreads();       // the rotated k heads are visible to the whole block
    store_token_kv_fp8(p.codes, p.scales, row + q_size, slot, p.num_heads_kv, d, p.num_layers, p.layer,
                       p.block_size, static_cast<int>(threadIdx.x) / 32, kThreads / 32,
                       static_cast<int>(threadIdx.x) % 32);
    return;
  }
  if (!k_dst) return;
  const bf16* v = row + q_size + kv_size;
  bf16* v_dst = k_dst + p.block_size * kv_size;  // V follows K's block_size rows
  if constexpr (kVec) {
    for (int i = static_cast<int>(threadIdx.x); i < static_cast<int>(kv_size / 8); i += kThreads) {
      reinterpret_cast<uint4*>(v_dst)[i] = reinterpret_cast<const uint4*>(v)[i];
    }
  } else {
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < kv_size / 2; i += blockDim.x) {
      reinterpret_cast<__nv_bfloat162*>(v_dst)[i] = reinterpret_cast<const __nv_bfloat162*>(v)[i];
    }
  }
}

// Block (x, y) takes kThreads chunks of kPer elements of token rows y, y + gridDim.y, ...: with kPer = 8
// (rows of a multiple of 8 elements, 16-byte aligned) one 16-byte load of the gate, one of up and one store
// per thread, and no division in the index arithmetic (a 64-bit division per element held this kernel to 40%
// of the copy bandwidth at prefill sizes).
template <int kPer>
__global__ void silu_mul_kernel(bf16* out, const bf16* gate_up, int64_t num_tokens, int64_t inter) {
  begin_dependent_kernel();
  const int64_t j = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kPer;
  if (j >= inter) return;
  for (int64_t t = blockIdx.y; t < num_tokens; t += gridDim.y) {
    const bf16* gate = gate_up + t * 2 * inter + j;
    bf16* o = out + t * inter + j;
    if constexpr (kPer == 8) {
      *reinterpret_cast<uint4*>(o) =
          silu_mul8(*reinterpret_cast<const uint4*>(gate), *reinterpret_cast<const uint4*>(gate + inter));
    } else {
      *o = silu_mul_value(__bfloat162float(gate[0]), __bfloat162float(gate[inter]));
    }
  }
}

__global__ void add_kernel(bf16* out, const bf16* a, const bf16* b, int64_t n) {
  begin_dependent_kernel();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}

}  // namespace

void launch_gather_rows(const GatherRowsParams& p, cudaStream_t stream) {
  if (p.num_rows > 0) {
    launch_kernel(copy_rows_kernel, static_cast<unsigned>(p.num_rows), kThreads, 0, stream, p.out, p.src, p.index,
                  p.hidden);
  }
}

void launch_rope(const RopeParams& p, cudaStream_t stream) {
  if (p.num_tokens > 0) {
    launch_kernel(rope_kernel, static_cast<unsigned>(p.num_tokens), kThreads, 0, stream, p.qkv, p.positions,
                  p.inv_freq, p.row_size, p.num_rope_heads, p.head_dim);
  }
}

void launch_store_kv(const KvStoreParams& p, cudaStream_t stream) {
  if (p.codes != nullptr) {
    launch_store_kv_fp8(p, stream);
    return;
  }
  if (p.num_tokens > 0) {
    const int64_t q_size = p.num_heads * p.head_dim, kv_size = p.num_heads_kv * p.head_dim;
    launch_kernel(store_kv_kernel, static_cast<unsigned>(p.num_tokens), kThreads, 0, stream, p.cache, p.qkv,
                  p.slot_mapping, q_size + 2 * kv_size, q_size, kv_size, p.num_layers, p.layer, p.block_size);
  }
}

void launch_rope_store_kv(const KvStoreParams& p, cudaStream_t stream) {
  if (p.num_tokens == 0) return;
  const size_t smem = sizeof(float2) * static_cast<size_t>(p.head_dim / 2);
  const bool vec = p.head_dim % 8 == 0 && (8 * kThreads) % p.head_dim == 0 &&
                   reinterpret_cast<uintptr_t>(p.qkv) % 16 == 0 &&
                   (p.cache == nullptr || reinterpret_cast<uintptr_t>(p.cache) % 16 == 0);
  const auto launch = [&](auto fp8, auto vec_) {
    launch_kernel(rope_store_kv_kernel<fp8.value, vec_.value>, static_cast<unsigned>(p.num_tokens), kThreads, smem,
                  stream, p);
  };
  using Yes = std::true_type;
  using No = std::false_type;
  if (p.codes != nullptr) {
    vec ? launch(Yes{}, Yes{}) : launch(Yes{}, No{});
  } else {
    vec ? launch(No{}, Yes{}) : launch(No{}, No{});
  }
}

void launch_silu_mul(const SiluMulParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0 || p.inter <= 0) return;
  const bool vec = p.inter % 8 == 0 && reinterpret_cast<uintptr_t>(p.out) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.gate_up) % 16 == 0;
  const int per = vec ? 8 : 1;
  const dim3 grid(static_cast<unsigned>((p.inter / per + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(p.num_tokens, 65535)));
  if (vec) {
    launch_kernel(silu_mul_kernel<8>, grid, kThreads, 0, stream, p.out, p.gate_up, p.num_tokens, p.inter);
  } else {
    launch_kernel(silu_mul_kernel<1>, grid, kThreads, 0, stream, p.out, p.gate_up, p.num_tokens, p.inter);
  }
}

void launch_add(const AddParams& p, cudaStream_t stream) {
  if (p.n > 0) launch_kernel(add_kernel, blocks_for(p.n), kThreads, 0, stream, p.out, p.a, p.b, p.n);
}

}  // namespace tide::cuda
