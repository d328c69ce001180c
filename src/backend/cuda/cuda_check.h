// Error checks for CUDA runtime and cuBLASLt calls: a failure becomes a tide::Error naming the call.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/error.h"

#define TIDE_CUDA_CHECK(call)                                                                          \
  do {                                                                                                 \
    const cudaError_t tide_err_ = (call);                                                              \
    if (tide_err_ != cudaSuccess) ::tide::fail("CUDA error in {}: {} ({}:{})", #call,                 \
                                               cudaGetErrorString(tide_err_), __FILE__, __LINE__);     \
  } while (0)

#define TIDE_CUBLAS_CHECK(call)                                                                        \
  do {                                                                                                 \
    const cublasStatus_t tide_st_ = (call);                                                            \
    if (tide_st_ != CUBLAS_STATUS_SUCCESS) ::tide::fail("cuBLAS error in {}: {} ({}:{})", #call,      \
                                                         cublasLtGetStatusString(tide_st_), __FILE__, __LINE__); \
  } while (0)
