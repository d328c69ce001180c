// Argument checks of the CUDA backend's ops (cuda_backend.cpp, cuda_kv.cpp): a tensor's data as the type
// its dtype must be, failing with the op's name for the tensor otherwise.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tide::cuda {

inline bf16* bf(const Tensor& t, const char* what) {
  if (t.dtype != DType::kBF16) fail("cuda backend: {} must be BF16, got {}", what, dtype_name(t.dtype));
  return static_cast<bf16*>(t.data);
}

template <typename T>
T* typed(const Tensor& t, DType dtype, const char* what) {
  if (t.dtype != dtype) fail("cuda backend: {} must be {}, got {}", what, dtype_name(dtype), dtype_name(t.dtype));
  return static_cast<T*>(t.data);
}

// The per-token row kernels hold a row in registers (row_tile.cuh).
inline void check_row(int64_t n, const char* op) {
  if (n > kMaxRowElements) fail("cuda backend: {} takes rows of at most {} elements, got {}", op, kMaxRowElements, n);
}

}  // namespace tide::cuda
