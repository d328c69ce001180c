// Checks the two wgmma forms the prefill attention kernel (src/backend/cuda/wgmma_attention.cu) relies on,
// with its shared-memory layouts, against a host product on random bf16 values:
//  - "ss": S[64 x 128] = Q[64 x 128] K[128 x 128]^T, Q and K as 128-byte-swizzled 64-dim panels (K-major);
//  - "rs": O[64 x 128] = P[64 x 128] V[128 x 128], P from registers (the S accumulator layout), V as the same
//    panels read transposed (MN-major), for both orders of the descriptor's two byte offsets.
// Prints the largest absolute error of each; the layout is right when it is at the level of f32 rounding.
// Build from the repository root: nvcc -std=c++17 -gencode=arch=compute_90a,code=sm_90a -O2 -I src
//   tools/gpu/wgmma_probe.cu -o wgmma_probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/wgmma.cuh"

using namespace tide::cuda;

namespace {

constexpr int kM = 64, kN = 128, kD = 128;

__device__ uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// a: [64, 128] row-major, b: [128, 128] row-major (K rows for ss, V rows for rs). out: [64, 128].
__global__ void probe(const __nv_bfloat16* a, const __nv_bfloat16* b, float* out_ss, float* out_rs, int swap) {
  extern __shared__ unsigned char raw[];
  const uint32_t base = (smem_addr(raw) + 1023) / 1024 * 1024;
  const uint32_t a_tile = base, b_tile = base + kM * kD * 2;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int i = tid; i < kM * 16; i += 128) {
    sts128(a_tile + wgmma::panel_offset<kM>(i / 16, i % 16), reinterpret_cast<const uint4*>(a)[i]);
  }
  for (int i = tid; i < kN * 16; i += 128) {
    sts128(b_tile + wgmma::panel_offset<kN>(i / 16, i % 16), reinterpret_cast<const uint4*>(b)[i]);
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();

  float d[64];
  wgmma::fence();
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint32_t step = (kk % 4) * 32;
    const uint64_t da = wgmma::desc_sw128(a_tile + (kk / 4) * kM * 128 + step, 16, 1024);
    const uint64_t db = wgmma::desc_sw128(b_tile + (kk / 4) * kN * 128 + step, 16, 1024);
    wgmma::m64n128k16_ss(d, da, db, kk > 0);
  }
  wgmma::commit_group();
  wgmma::wait_group<0>();
  wgmma::hold(d);
  for (int j = 0; j < 16; ++j) {
    for (int e = 0; e < 4; ++e) {
      const int row = 16 * warp + lane / 4 + 8 * (e / 2), col = 8 * j + 2 * (lane % 4) + e % 2;
      out_ss[row * kN + col] = d[4 * j + e];
    }
  }

  // P = a (as the accumulator layout: rows of a, columns = keys), O = P V.
  float pr[64];
  for (int j = 0; j < 16; ++j) {
    for (int e = 0; e < 4; ++e) {
      const int row = 16 * warp + lane / 4 + 8 * (e / 2), col = 8 * j + 2 * (lane % 4) + e % 2;
      pr[4 * j + e] = __bfloat162float(a[row * kD + col]);
    }
  }
  uint32_t pa[8][4];
  for (int kk = 0; kk < 8; ++kk) {
    pa[kk][0] = pack(pr[8 * kk], pr[8 * kk + 1]);
    pa[kk][1] = pack(pr[8 * kk + 2], pr[8 * kk + 3]);
    pa[kk][2] = pack(pr[8 * kk + 4], pr[8 * kk + 5]);
    pa[kk][3] = pack(pr[8 * kk + 6], pr[8 * kk + 7]);
  }
  float o[64];
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  wgmma::fence();
  for (int kk = 0; kk < 8; ++kk) {
    const uint32_t lbo = swap ? 1024 : kN * 128, sbo = swap ? kN * 128 : 1024;
    wgmma::m64n128k16_rs_tb(o, pa[kk], wgmma::desc_sw128(b_tile + kk * 16 * 128, lbo, sbo));
  }
  wgmma::commit_group();
  wgmma::wait_group<0>();
  wgmma::hold(o);
  for (int kk = 0; kk < 8; ++kk) wgmma::hold(pa[kk]);
  for (int j = 0; j < 16; ++j) {
    for (int e = 0; e < 4; ++e) {
      const int row = 16 * warp + lane / 4 + 8 * (e / 2), col = 8 * j + 2 * (lane % 4) + e % 2;
      out_rs[row * kD + col] = o[4 * j + e];
    }
  }
}

}  // namespace

int main() {
  std::vector<__nv_bfloat16> a(kM * kD), b(kN * kD);
  std::vector<float> af(a.size()), bf(b.size());
  srand(7);
  const auto value = [] { return __float2bfloat16(rand() / static_cast<float>(RAND_MAX) - 0.5f); };
  for (size_t i = 0; i < a.size(); ++i) af[i] = __bfloat162float(a[i] = value());
  for (size_t i = 0; i < b.size(); ++i) bf[i] = __bfloat162float(b[i] = value());
  __nv_bfloat16 *da, *db;
  float *ss, *rs;
  cudaMalloc(&da, a.size() * 2);
  cudaMalloc(&db, b.size() * 2);
  cudaMalloc(&ss, kM * kN * 4);
  cudaMalloc(&rs, kM * kD * 4);
  cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  const int smem = 1024 + (kM + kN) * kD * 2;
  cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  for (int swap = 0; swap < 2; ++swap) {
    probe<<<1, 128, smem>>>(da, db, ss, rs, swap);
    const cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      std::printf("probe failed: %s\n", cudaGetErrorString(err));
      return 1;
    }
    std::vector<float> hs(kM * kN), hr(kM * kD);
    cudaMemcpy(hs.data(), ss, hs.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(hr.data(), rs, hr.size() * 4, cudaMemcpyDeviceToHost);
    double err_ss = 0, err_rs = 0;
    for (int m = 0; m < kM; ++m) {
      for (int n = 0; n < kN; ++n) {
        double ref_ss = 0, ref_rs = 0;
        for (int k = 0; k < kD; ++k) ref_ss += double(af[m * kD + k]) * bf[n * kD + k];
        for (int k = 0; k < kN; ++k) ref_rs += double(af[m * kD + k]) * bf[k * kD + n];
        err_ss = std::fmax(err_ss, std::fabs(ref_ss - hs[m * kN + n]));
        err_rs = std::fmax(err_rs, std::fabs(ref_rs - hr[m * kD + n]));
      }
    }
    std::printf("offsets %s: ss max error %.3g, rs max error %.3g\n", swap ? "swapped" : "as the kernel", err_ss,
                err_rs);
  }
  return 0;
}
