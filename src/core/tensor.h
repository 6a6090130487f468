#pragma once
// A tensor is a typed, strided view of a byte buffer. Buffers are either owned
// (64-byte aligned, shared between views) or borrowed (an arena slot, a memory
// mapped file); a borrowed buffer must outlive every view of it.
#include <cstddef>
#include <memory>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace strata {

inline constexpr size_t kTensorAlignment = 64;

class Buffer {
 public:
  static std::shared_ptr<Buffer> allocate(size_t bytes);              // uninitialised
  static std::shared_ptr<Buffer> borrow(void* data, size_t bytes);   // not owned
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Buffer(std::byte* data, size_t size, bool owned) : data_(data), size_(size), owned_(owned) {}
  std::byte* data_;
  size_t size_;
  bool owned_;
};

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dtype);
  static Tensor zeros(const Shape& shape, DType dtype);
  // A contiguous view of memory owned elsewhere.
  static Tensor borrow(void* data, const Shape& shape, DType dtype);

  bool defined() const { return buffer_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  DType dtype() const { return dtype_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t axis) const;  // negative axes count from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* raw() const { return buffer_->data() + offset_bytes_; }
  template <typename T>
  T* data() const {
    STRATA_CHECK(dtype_of<T>() == dtype_, "tensor is {}, accessed as {}", dtype_name(dtype_),
                 dtype_name(dtype_of<T>()));
    return static_cast<T*>(raw());
  }

  // Views sharing this tensor's buffer.
  Tensor reshape(const Shape& shape) const;  // requires contiguity
  Tensor narrow(int64_t axis, int64_t start, int64_t length) const;

  Tensor clone() const;               // contiguous deep copy
  void copy_from(const Tensor& source);  // same shape and dtype
  void fill_zero();
  Tensor to(DType dtype) const;       // converted contiguous copy
  double item() const;                // single-element tensor as double

 private:
  std::shared_ptr<Buffer> buffer_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  std::vector<int64_t> strides_;
  DType dtype_ = DType::F32;
};

}  // namespace strata
