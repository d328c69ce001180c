// How fast can a kernel stream a decode-sized weight matrix from HBM into shared memory with bulk copies
// (cp.async.bulk, one per row and stage, counted on mbarriers), and what does it lose to the stage shape, to
// launching once per layer and to the products? The streaming FP8 matmul (src/backend/cuda/fp8_stream_matmul.cu)
// copies stages of 16 rows x 1 KB. Over 32 copies of R7B's down projection [4096, 14336] (1.9 GB, far past the
// L2), for stages of R rows x P contiguous bytes, S stages and C CTAs per SM, the probe times
//  - "whole": one launch over all 32 copies, the consumers only reading each stage back;
//  - "per layer": 32 launches of one copy each, as a decode step's matmuls;
//  - "per layer, math": the same with the consumers' tensor-core products (16 rows x 1 KB stages only);
// and a device-to-device cudaMemcpy of the same bytes for reference. Prints GB/s of weights.
// Build from the repository root: nvcc -std=c++17 -arch=sm_90a -O2 -I src tools/gpu/stream_probe.cu -o stream_probe
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdint>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/fp8_mma.cuh"

using namespace tide::cuda;

#define CHECK_CUDA(x)                                                                      \
  do {                                                                                     \
    cudaError_t e = (x);                                                                   \
    if (e != cudaSuccess) {                                                                \
      std::printf("cuda error %s at line %d\n", cudaGetErrorString(e), __LINE__);         \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

constexpr int kConsumers = 4;

// Units are R rows x P bytes, numbered row group by row group (P bytes of K at a time); CTA c streams units
// [c U / G, (c + 1) U / G). Producer lanes 0..R-1 copy one row each per stage.
__global__ void __launch_bounds__(32 * (kConsumers + 1))
    probe_kernel(const uint8_t* w, int64_t rows, int64_t k, int rows_per_stage, int piece, int stages,
                 unsigned* sink, const uint8_t* x, bool math) {
  extern __shared__ __align__(128) uint8_t smem[];
  const int stage_bytes = rows_per_stage * piece;
  const uint32_t stage0 = (smem_addr(smem) + 127) & ~127u;
  const uint32_t full0 = stage0 + stages * stage_bytes, empty0 = full0 + 8 * stages;
  const int64_t chunks = k / piece, groups = rows / rows_per_stage, units = groups * chunks;
  const int64_t begin = units * blockIdx.x / gridDim.x, end = units * (blockIdx.x + 1) / gridDim.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) mbar_init(full0 + 8 * s, 1), mbar_init(empty0 + 8 * s, kConsumers);
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;" ::: "memory");
  }
  __syncthreads();
  if (warp == kConsumers) {
    if (lane >= rows_per_stage) return;
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    int s = 0;
    uint32_t phase = 0;
    for (int64_t u = begin; u < end; ++u) {
      if (u - begin >= stages) mbar_wait(empty0 + 8 * s, phase ^ 1);
      const uint32_t full = full0 + 8 * s;
      if (lane == 0) mbar_arrive_expect_tx(full, stage_bytes);
      __syncwarp((1u << rows_per_stage) - 1);
      const int64_t row = (u / chunks) * rows_per_stage + lane, off = (u % chunks) * piece;
      bulk_copy(stage0 + s * stage_bytes + lane * piece, w + row * k + off, piece, full, policy);
      if (++s == stages) s = 0, phase ^= 1;
    }
    return;
  }
  unsigned acc = 0;
  float facc[4] = {};
  int s = 0;
  uint32_t phase = 0;
  const int g = lane / 4, q = lane % 4;
  for (int64_t u = begin; u < end; ++u) {
    const uint32_t stage = stage0 + s * stage_bytes;
    if (math) {
      // As the streaming matmul's consumers (16 rows x 1 KB stages only): token 0's activations from global
      // memory, then rows g and g + 8 of 64-byte steps warp, warp + 4, ... into two m16n8k32 products each
      // (rows unpadded: two rows of a quarter warp share their banks).
      const int64_t k0 = (u % chunks) * piece;
      uint4 xv[4], wv[4][2];
      for (int t = 0; t < 4; ++t) {
        xv[t] = g == 0 ? __ldg(reinterpret_cast<const uint4*>(x + k0 + (warp + 4 * t) * 64 + 16 * q))
                       : make_uint4(0, 0, 0, 0);
      }
      mbar_wait(full0 + 8 * s, phase);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const uint32_t at = stage + g * piece + (warp + 4 * t) * 64 + 16 * q;
        wv[t][0] = lds128(at);
        wv[t][1] = lds128(at + 8 * piece);
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(empty0 + 8 * s);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        float d0[4], d1[4];
        mma_e4m3(d0, wv[t][0].x, wv[t][1].x, wv[t][0].y, wv[t][1].y, xv[t].x, xv[t].y);
        mma_e4m3(d1, wv[t][0].z, wv[t][1].z, wv[t][0].w, wv[t][1].w, xv[t].z, xv[t].w);
        for (int e = 0; e < 4; ++e) facc[e] += d0[e] + d1[e];
      }
    } else {
      mbar_wait(full0 + 8 * s, phase);
      for (int b = threadIdx.x * 16; b < stage_bytes; b += 32 * kConsumers * 16) {
        const uint4 v = lds128(stage + b);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(empty0 + 8 * s);
    }
    if (++s == stages) s = 0, phase ^= 1;
  }
  acc ^= __float_as_uint(facc[0] + facc[1] + facc[2] + facc[3]);
  if (acc == 0x12345678u) *sink = acc;  // keeps the reads
}

int main() {
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t n = 4096, k = 14336, copies = 32, rows = n * copies, bytes = rows * k;
  uint8_t *w = nullptr, *dst = nullptr;
  unsigned* sink = nullptr;
  CHECK_CUDA(cudaMalloc(&w, bytes));
  CHECK_CUDA(cudaMalloc(&dst, bytes));
  CHECK_CUDA(cudaMalloc(&sink, 4));
  CHECK_CUDA(cudaMemset(w, 1, bytes));
  uint8_t* x = nullptr;
  CHECK_CUDA(cudaMalloc(&x, k));
  CHECK_CUDA(cudaMemset(x, 1, k));
  CHECK_CUDA(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  auto time = [&](auto&& body) {
    body();
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
      cudaEventRecord(a);
      body();
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float ms = 0;
      cudaEventElapsedTime(&ms, a, b);
      best = ms < best ? ms : best;
    }
    return static_cast<double>(bytes) / (best * 1e-3) / 1e9;
  };
  std::printf("sms %d, %.2f GB per run\n", sms, bytes / 1e9);
  std::printf("cudaMemcpy device to device: %.0f GB/s (read + write counted once)\n",
              time([&] { cudaMemcpyAsync(dst, w, bytes, cudaMemcpyDeviceToDevice); }));
  struct Config {
    int rows, piece, stages, ctas;
  };
  const Config configs[] = {{16, 1024, 4, 2}, {16, 1024, 6, 2}, {16, 1024, 8, 1}, {16, 2048, 3, 2},
                            {8, 2048, 4, 2},  {8, 2048, 6, 2},  {4, 3584, 4, 2},  {4, 3584, 6, 2},
                            {2, 7168, 4, 2},  {1, 14336, 4, 2}, {1, 14336, 6, 2}, {4, 3584, 4, 3},
                            {8, 1024, 8, 2},  {16, 512, 8, 2},  {2, 7168, 8, 1}};
  // Whole: one launch over all 32 copies; per layer: 32 launches of one copy each (as a decode step's
  // matmuls); math: per layer, with the consumers' products (16-row stages only).
  for (int mode = 0; mode < 3; ++mode) {
    const char* names[] = {"whole", "per layer", "per layer, math"};
    for (const Config& c : configs) {
      if (k % c.piece != 0 || (mode == 2 && (c.rows != 16 || c.piece != 1024))) continue;
      const int stage = c.rows * c.piece;
      const size_t smem = 128 + static_cast<size_t>(c.stages) * (stage + 16);
      const int launches = mode == 0 ? 1 : static_cast<int>(copies);
      const int64_t launch_rows = rows / launches;
      const auto gbps = time([&] {
        for (int l = 0; l < launches; ++l) {
          probe_kernel<<<sms * c.ctas, 32 * (kConsumers + 1), smem>>>(w + l * launch_rows * k, launch_rows, k, c.rows,
                                                                       c.piece, c.stages, sink, x, mode == 2);
        }
      });
      const cudaError_t e = cudaGetLastError();
      std::printf("%-16s %2d rows x %5d B, %d stages, %d CTAs/SM (%3zu KB smem/CTA): %s%.0f GB/s\n", names[mode],
                  c.rows, c.piece, c.stages, c.ctas, smem / 1024, e == cudaSuccess ? "" : cudaGetErrorString(e), gbps);
    }
  }
  return 0;
}
