#pragma once
// A tensor is a typed, strided view of a byte buffer on a device (core/device.h).
// Host buffers are either owned (64-byte aligned, shared between views) or
// borrowed (a memory mapped file, a caller's array); a borrowed buffer must
// outlive every view of it. A device's buffer is its own handle (a cl_mem): its
// bytes are reached only through the device's copies, never dereferenced.
#include <cstddef>
#include <memory>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace strata {

inline constexpr size_t kTensorAlignment = 64;

class Buffer {
 public:
  static std::shared_ptr<Buffer> allocate(size_t bytes);              // uninitialised
  static std::shared_ptr<Buffer> borrow(void* data, size_t bytes);   // not owned
  // Memory of an accelerator, named by its own `handle`, which `release` frees.
  static std::shared_ptr<Buffer> on_device(const Device& device, void* handle, size_t bytes,
                                           void (*release)(void*));
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const Device& device() const { return device_ ? *device_ : host_device(); }
  bool on_host() const { return device_ == nullptr; }
  // Host memory only: reading a device's bytes is a copy (Tensor::to_host), never a dereference.
  std::byte* data() const {
    if (device_ != nullptr) [[unlikely]] host_access_error();
    return data_;
  }
  void* handle() const { return handle_; }  // a device buffer's own handle
  size_t size() const { return size_; }

 private:
  Buffer(std::byte* data, size_t size, bool owned) : data_(data), size_(size), owned_(owned) {}
  [[noreturn]] void host_access_error() const;
  std::byte* data_;
  size_t size_;
  bool owned_;
  const Device* device_ = nullptr;  // null: the host
  void* handle_ = nullptr;
  void (*release_)(void*) = nullptr;
};

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dtype, const Device& device = host_device());
  static Tensor zeros(const Shape& shape, DType dtype, const Device& device = host_device());
  // A contiguous view of host memory owned elsewhere.
  static Tensor borrow(void* data, const Shape& shape, DType dtype);
  // A contiguous view of `buffer`'s bytes from `offset_bytes` on (an arena's slot), keeping it alive.
  static Tensor view(std::shared_ptr<Buffer> buffer, size_t offset_bytes, const Shape& shape, DType dtype);

  bool defined() const { return buffer_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  DType dtype() const { return dtype_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t axis) const;  // negative axes count from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  const Device& device() const { return buffer_->device(); }
  bool on_host() const { return buffer_->on_host(); }
  const Buffer& buffer() const { return *buffer_; }
  size_t offset_bytes() const { return offset_bytes_; }

  // Host memory only (an error on a device tensor: copy it with to_host first).
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
  // Its shape as `dtype`, in its own first bytes (`dtype` no wider; contiguous): storage kept for one
  // dtype holding another.
  Tensor reinterpreted(DType dtype) const;

  Tensor clone() const;               // contiguous deep copy on the same device
  // Same shape and dtype, from any device: between devices through their copies (both contiguous).
  void copy_from(const Tensor& source);
  void fill_zero();
  // A contiguous copy on `device` (this tensor itself when it is already there).
  Tensor to_device(const Device& device) const;
  Tensor to_host() const { return to_device(host_device()); }
  Tensor host_copy() const;  // a new contiguous host tensor holding these values, from any device
  Tensor to(DType dtype) const;       // converted contiguous copy (host)
  double item() const;                // single-element host tensor as double

 private:
  void copy_between_devices(const Tensor& source);

  std::shared_ptr<Buffer> buffer_;
  size_t offset_bytes_ = 0;
  Shape shape_;
  std::vector<int64_t> strides_;
  DType dtype_ = DType::F32;
};

}  // namespace strata
