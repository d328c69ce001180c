// Tensor maps (the descriptors of Hopper's tensor-memory-accelerator copies) encoded on the host through the
// driver's cuTensorMapEncodeTiled, reached through the runtime so tide does not link libcuda. Used by the FP8
// matmuls that stream weights (fp8_stream_matmul.cu, fp8_wgmma_matmul.cu).
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tide::cuda {

// cuTensorMapEncodeTiled from the driver, or null where the driver does not offer it (asked once).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const auto encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

// A row-major byte matrix [rows, row_bytes] as a 2D map whose boxes are `box_rows` rows of 128 bytes, stored
// in shared memory with the 128-byte swizzle (16-byte chunk c of row r at c ^ (r % 8)): the layout wgmma's
// K-major descriptors read (wgmma.cuh). Boxes reaching past the matrix are zero-filled. False if the driver
// cannot encode it (row_bytes must be a multiple of 16 and `base` 16-byte aligned).
inline bool encode_rows_sw128(CUtensorMap* map, const void* base, int64_t rows, int64_t row_bytes, int box_rows) {
  const auto encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {128, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, element_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace tide::cuda
