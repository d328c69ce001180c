// Reference ops of the CPU backend (all but attention, which lives in cpu_attention.cpp).
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "backend/uniform_fill.h"
#include "core/error.h"
#include "core/parallel.h"

namespace tide {
namespace {

void check_f32(const Tensor& t, const char* what) {
  if (t.dtype != DType::kF32) fail("cpu backend: {} must be F32, got {}", what, dtype_name(t.dtype));
}

void check_i32(const Tensor& t, const char* what) {
  if (t.dtype != DType::kI32) fail("cpu backend: {} must be I32, got {}", what, dtype_name(t.dtype));
}

// Host memory the kernel can give without swapping (/proc/meminfo's MemAvailable), or -1 when unknown.
int64_t host_memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

// Allocations of this size and larger are compared with the memory available first.
constexpr uint64_t kCheckedAllocBytes = uint64_t{64} << 20;

[[noreturn]] void fail_host_alloc(uint64_t bytes, const Shape& shape, DType dtype) {
  const int64_t available = host_memory_available();
  throw OutOfMemoryError(fmt::format(
      "cannot allocate {} bytes ({:.2f} GiB) of host memory for a {} tensor of shape {}: {}", bytes,
      static_cast<double>(bytes) / (1u << 30), dtype_name(dtype), shape.str(),
      available < 0 ? std::string("the memory available is unknown")
                    : fmt::format("{} bytes ({:.2f} GiB) are available", available, static_cast<double>(available) / (1u << 30))));
}

// host_tensor, with an allocation that cannot be made reported as OutOfMemoryError naming the bytes asked for
// and the bytes available, never a bare std::bad_alloc. Every tensor is zero-filled, so an allocation the
// kernel's overcommit would grant beyond the memory available is refused before it is touched (the process
// would otherwise end in the OOM killer).
Tensor checked_host_tensor(DType dtype, const Shape& shape) {
  uint64_t bytes = dtype_size(dtype);
  for (int i = 0; i < shape.ndim; ++i) {
    const int64_t d = shape.dims[static_cast<size_t>(i)];
    if (d < 0) fail("cpu backend: negative dimension {} in a tensor shape", d);
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes) || bytes > uint64_t{INT64_MAX}) {
      throw OutOfMemoryError(fmt::format("cannot allocate a {} tensor of shape {}: more than 2^63 bytes",
                                         dtype_name(dtype), shape.str()));
    }
  }
  if (bytes >= kCheckedAllocBytes) {
    const int64_t available = host_memory_available();
    if (available >= 0 && bytes > static_cast<uint64_t>(available)) fail_host_alloc(bytes, shape, dtype);
  }
  try {
    return host_tensor(dtype, shape);
  } catch (const std::bad_alloc&) {
    fail_host_alloc(bytes, shape, dtype);
  }
}

}  // namespace

// --- memory ---

Tensor CpuBackend::alloc(DType dtype, Shape shape) { return checked_host_tensor(dtype, shape); }
Tensor CpuBackend::alloc_host(DType dtype, Shape shape) { return checked_host_tensor(dtype, shape); }

void CpuBackend::upload_into_as(Tensor t, const void* host, DType host_dtype) {
  const bool is_float = host_dtype == DType::kF32 || host_dtype == DType::kF16 || host_dtype == DType::kBF16;
  const DType dtype = t.dtype;
  if (is_float && dtype != DType::kF32) fail("cpu backend: float data is stored as F32, not {}", dtype_name(dtype));
  if (!is_float && dtype != host_dtype) fail("cpu backend: cannot convert {} to {}", dtype_name(host_dtype), dtype_name(dtype));
  if (is_float) {
    // Slices of at least 2^20 elements converted by threads of their own (weights at load).
    const auto* in = static_cast<const unsigned char*>(host);
    const size_t in_size = dtype_size(host_dtype);
    parallel_for(t.numel(), int64_t{1} << 20, [&](int64_t begin, int64_t end) {
      convert_to_f32(in + static_cast<size_t>(begin) * in_size, host_dtype, t.as<float>() + begin,
                     static_cast<size_t>(end - begin));
    });
  } else {
    std::memcpy(t.data, host, t.nbytes());  // integers, FP8 codes, bytes: as they are
  }
}

void CpuBackend::upload_into(Tensor t, const void* host) { std::memcpy(t.data, host, t.nbytes()); }

void CpuBackend::download(const Tensor& t, void* host) { std::memcpy(host, t.data, t.nbytes()); }

// --- ops ---

// out: [T, H], table: [V, H], ids: [T]
void CpuBackend::embedding(Tensor out, const Tensor& table, const Tensor& ids) {
  check_f32(table, "embedding table");
  check_i32(ids, "token ids");
  const int64_t vocab = table.dim(0), hidden = table.dim(1);
  TIDE_CHECK(out.dim(0) == ids.numel() && out.dim(1) == hidden);
  for (int64_t t = 0; t < ids.numel(); ++t) {
    const int32_t id = ids.as<int32_t>()[t];
    if (id < 0 || id >= vocab) fail("token id {} is out of range for a vocabulary of {}", id, vocab);
    std::memcpy(out.as<float>() + t * hidden, table.as<float>() + id * hidden, sizeof(float) * hidden);
  }
}

// out: [R, H], x: [T, H], rows: [R]
void CpuBackend::gather_rows(Tensor out, const Tensor& x, const Tensor& rows) {
  check_i32(rows, "rows");
  const int64_t hidden = x.dim(1);
  TIDE_CHECK(out.dim(0) == rows.numel() && out.dim(1) == hidden);
  for (int64_t r = 0; r < rows.numel(); ++r) {
    const int32_t row = rows.as<int32_t>()[r];
    TIDE_CHECK(row >= 0 && row < x.dim(0));
    std::memcpy(out.as<float>() + r * hidden, x.as<float>() + row * hidden, sizeof(float) * hidden);
  }
}

// out, x: [T, H], weight: [H]
void CpuBackend::layer_norm(Tensor out, const Tensor& x, const Tensor& weight, float eps) {
  check_f32(x, "layer_norm input");
  const int64_t hidden = x.dim(1);
  TIDE_CHECK(out.shape == x.shape && weight.numel() == hidden);
  const float* w = weight.as<float>();
  for (int64_t t = 0; t < x.dim(0); ++t) {
    const float* row = x.as<float>() + t * hidden;
    float* y = out.as<float>() + t * hidden;
    float sum = 0;
    for (int64_t i = 0; i < hidden; ++i) sum += row[i];
    const float mean = sum / static_cast<float>(hidden);
    float sq = 0;
    for (int64_t i = 0; i < hidden; ++i) sq += (row[i] - mean) * (row[i] - mean);
    const float inv_std = 1.0f / std::sqrt(sq / static_cast<float>(hidden) + eps);
    for (int64_t i = 0; i < hidden; ++i) y[i] = w[i] * ((row[i] - mean) * inv_std);
  }
}

// out: [T, N], x: [T, K], w: [N, K]
void CpuBackend::matmul(Tensor out, const Tensor& x, const Tensor& w, float alpha) {
  check_f32(x, "matmul input");
  check_f32(w, "matmul weight");
  const int64_t t = x.dim(0), k = x.dim(1), n = w.dim(0);
  TIDE_CHECK(w.dim(1) == k && out.dim(0) == t && out.dim(1) == n);
  if (t == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(t), static_cast<int>(n),
              static_cast<int>(k), alpha, x.as<float>(), static_cast<int>(k), w.as<float>(), static_cast<int>(k),
              0.0f, out.as<float>(), static_cast<int>(n));
}

// qkv: [T, heads_total * D], positions: [T], inv_freq: [D / 2]
void CpuBackend::rope(Tensor qkv, const Tensor& positions, const Tensor& inv_freq, int64_t num_rope_heads) {
  check_f32(qkv, "rope input");
  check_f32(inv_freq, "rope inv_freq");
  check_i32(positions, "positions");
  const int64_t row_size = qkv.dim(1), half = inv_freq.numel(), head_dim = 2 * half;
  TIDE_CHECK(qkv.dim(0) == positions.numel() && num_rope_heads * head_dim <= row_size);
  for (int64_t t = 0; t < qkv.dim(0); ++t) {
    const float pos = static_cast<float>(positions.as<int32_t>()[t]);
    float* row = qkv.as<float>() + t * row_size;
    for (int64_t j = 0; j < half; ++j) {
      // The angle is rounded to f32 as in transformers (not exact math): long positions match the reference.
      const float angle = pos * inv_freq.as<float>()[j];
      const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
      const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
      for (int64_t h = 0; h < num_rope_heads; ++h) {
        float* pair = row + h * head_dim + 2 * j;
        const float x0 = pair[0], x1 = pair[1];
        pair[0] = x0 * c - x1 * s;
        pair[1] = x1 * c + x0 * s;
      }
    }
  }
}

// out: [T, I], gate_up: [T, 2I]
void CpuBackend::silu_mul(Tensor out, const Tensor& gate_up) {
  check_f32(gate_up, "silu_mul input");
  const int64_t inter = out.dim(1);
  TIDE_CHECK(gate_up.dim(1) == 2 * inter && gate_up.dim(0) == out.dim(0));
  for (int64_t t = 0; t < out.dim(0); ++t) {
    const float* gate = gate_up.as<float>() + t * 2 * inter;
    const float* up = gate + inter;
    float* y = out.as<float>() + t * inter;
    for (int64_t i = 0; i < inter; ++i) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  }
}

void CpuBackend::copy(Tensor out, const Tensor& x) {
  if (out.dtype != x.dtype || out.shape != x.shape) fail("cpu backend: copy between different dtypes or shapes");
  std::memcpy(out.data, x.data, x.nbytes());
}

// t: any shape, F32
void CpuBackend::fill_uniform(Tensor t, float center, float amplitude, uint64_t seed) {
  check_f32(t, "fill_uniform output");
  float* out = t.as<float>();
  // Elements are independent: slices of at least 2^20 go to threads of their own (a dummy model's weights).
  parallel_for(t.numel(), int64_t{1} << 20, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = uniform_fill::value(seed, static_cast<uint64_t>(i), center, amplitude);
  });
}

void CpuBackend::add(Tensor out, const Tensor& a, const Tensor& b) {
  check_f32(a, "add input");
  TIDE_CHECK(a.shape == b.shape && out.shape == a.shape);
  const float* pa = a.as<float>();
  const float* pb = b.as<float>();
  float* po = out.as<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = pa[i] + pb[i];
}

}  // namespace tide
