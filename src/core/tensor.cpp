#include "core/tensor.h"

#include <cstring>
#include <new>

#include "core/error.h"

namespace tide {

Shape::Shape(std::initializer_list<int64_t> list) {
  TIDE_CHECK(list.size() <= kMaxDims);
  for (int64_t d : list) dims[static_cast<size_t>(ndim++)] = d;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[static_cast<size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (ndim != other.ndim) return false;
  for (int i = 0; i < ndim; ++i) {
    if (dims[static_cast<size_t>(i)] != other.dims[static_cast<size_t>(i)]) return false;
  }
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims[static_cast<size_t>(i)]);
  }
  return s + "]";
}

Tensor Tensor::reshape(Shape new_shape) const {
  TIDE_CHECK(new_shape.numel() == numel());
  Tensor t = *this;
  t.shape = new_shape;
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  TIDE_CHECK(shape.ndim >= 1 && 0 <= begin && begin <= end && end <= shape[0]);
  const size_t row_bytes = nbytes() / static_cast<size_t>(shape[0] == 0 ? 1 : shape[0]);
  Tensor t = *this;
  t.data = static_cast<char*>(data) + static_cast<size_t>(begin) * row_bytes;
  t.shape.dims[0] = end - begin;
  return t;
}

Tensor host_tensor(DType dtype, Shape shape) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  const size_t bytes = t.nbytes();
  constexpr std::align_val_t kAlign{64};
  void* p = ::operator new(bytes == 0 ? 1 : bytes, kAlign);
  std::memset(p, 0, bytes);
  t.storage = std::shared_ptr<void>(p, [](void* q) { ::operator delete(q, std::align_val_t{64}); });
  t.data = p;
  return t;
}

}  // namespace tide
