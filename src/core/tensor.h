// Tensor: a typed, shaped, contiguous (row-major) view of memory owned by a backend or the host.
// Copying a Tensor copies the view and shares ownership of the storage. Non-goals: strides, broadcasting.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "core/dtype.h"

namespace tide {

inline constexpr int kMaxDims = 4;

struct Shape {
  std::array<int64_t, kMaxDims> dims{};
  int ndim = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> list);

  int64_t operator[](int i) const { return dims[static_cast<size_t>(i)]; }
  int64_t numel() const;
  bool operator==(const Shape& other) const;
  std::string str() const;  // "[2, 3]"
};

struct Tensor {
  std::shared_ptr<void> storage;  // keeps the memory alive; null for a non-owning view
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;

  bool empty() const { return data == nullptr; }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  int64_t dim(int i) const { return shape[i]; }

  template <typename T>
  T* as() const { return static_cast<T*>(data); }

  // Same storage, new shape with the same number of elements.
  Tensor reshape(Shape new_shape) const;
  // Rows [begin, end) of the outermost dimension.
  Tensor slice_rows(int64_t begin, int64_t end) const;
};

// A host tensor allocated with operator new (64-byte aligned), zero-filled.
Tensor host_tensor(DType dtype, Shape shape);

}  // namespace tide
