#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace strata {

std::shared_ptr<Buffer> Buffer::allocate(size_t bytes) {
  size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  if (rounded == 0) rounded = kTensorAlignment;
  void* data = std::aligned_alloc(kTensorAlignment, rounded);
  if (data == nullptr) fail("out of memory allocating {} bytes", bytes);
  return std::shared_ptr<Buffer>(new Buffer(static_cast<std::byte*>(data), bytes, true));
}

std::shared_ptr<Buffer> Buffer::borrow(void* data, size_t bytes) {
  return std::shared_ptr<Buffer>(new Buffer(static_cast<std::byte*>(data), bytes, false));
}

std::shared_ptr<Buffer> Buffer::on_device(const Device& device, void* handle, size_t bytes, void (*release)(void*)) {
  auto buffer = std::shared_ptr<Buffer>(new Buffer(nullptr, bytes, false));
  buffer->device_ = &device;
  buffer->handle_ = handle;
  buffer->release_ = release;
  return buffer;
}

Buffer::~Buffer() {
  if (owned_) std::free(data_);
  if (release_ != nullptr) release_(handle_);
}

void Buffer::host_access_error() const {
  fail("internal check failed: host code dereferenced a buffer of {} bytes on device '{}' (copy it to the host "
       "first: Tensor::to_host)",
       size_, device_->name());
}

Tensor Tensor::empty(const Shape& shape, DType dtype, const Device& device) {
  for (int64_t extent : shape) {
    if (extent < 0) fail("negative extent in shape {}", shape_str(shape));
  }
  Tensor tensor;
  tensor.shape_ = shape;
  tensor.strides_ = contiguous_strides(shape);
  tensor.dtype_ = dtype;
  tensor.buffer_ = device.allocate(tensor.nbytes());
  return tensor;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, const Device& device) {
  Tensor tensor = empty(shape, dtype, device);
  tensor.fill_zero();
  return tensor;
}

Tensor Tensor::borrow(void* data, const Shape& shape, DType dtype) {
  Tensor tensor;
  tensor.shape_ = shape;
  tensor.strides_ = contiguous_strides(shape);
  tensor.dtype_ = dtype;
  tensor.buffer_ = Buffer::borrow(data, tensor.nbytes());
  return tensor;
}

Tensor Tensor::view(std::shared_ptr<Buffer> buffer, size_t offset_bytes, const Shape& shape, DType dtype) {
  Tensor tensor;
  tensor.shape_ = shape;
  tensor.strides_ = contiguous_strides(shape);
  tensor.dtype_ = dtype;
  STRATA_CHECK(offset_bytes + tensor.nbytes() <= buffer->size(), "a view of {} bytes at {} of a buffer of {}",
               tensor.nbytes(), offset_bytes, buffer->size());
  tensor.buffer_ = std::move(buffer);
  tensor.offset_bytes_ = offset_bytes;
  return tensor;
}

int64_t Tensor::size(int64_t axis) const {
  int64_t rank = dim();
  if (axis < 0) axis += rank;
  STRATA_CHECK(axis >= 0 && axis < rank, "axis {} out of range for shape {}", axis, shape_str(shape_));
  return shape_[static_cast<size_t>(axis)];
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

Tensor Tensor::reshape(const Shape& shape) const {
  STRATA_CHECK(is_contiguous(), "reshape of a non-contiguous tensor");
  STRATA_CHECK(shape_numel(shape) == numel(), "reshape {} -> {}", shape_str(shape_), shape_str(shape));
  Tensor view = *this;
  view.shape_ = shape;
  view.strides_ = contiguous_strides(shape);
  return view;
}

Tensor Tensor::narrow(int64_t axis, int64_t start, int64_t length) const {
  if (axis < 0) axis += dim();
  STRATA_CHECK(axis >= 0 && axis < dim(), "narrow axis {}", axis);
  STRATA_CHECK(start >= 0 && length >= 0 && start + length <= shape_[axis], "narrow [{}, {}) of {}",
               start, start + length, shape_[axis]);
  Tensor view = *this;
  view.offset_bytes_ += static_cast<size_t>(start * strides_[axis]) * dtype_size(dtype_);
  view.shape_[axis] = length;
  return view;
}

Tensor Tensor::reinterpreted(DType dtype) const {
  STRATA_CHECK(is_contiguous() && dtype_size(dtype) <= dtype_size(dtype_), "a {} tensor {} viewed as {}",
               dtype_name(dtype_), shape_str(shape_), dtype_name(dtype));
  Tensor view = *this;
  view.dtype_ = dtype;
  return view;
}

namespace {

// Visits every element of a possibly strided tensor in row-major order,
// passing the element's byte offset.
template <typename Visit>
void for_each_offset(const Shape& shape, const std::vector<int64_t>& strides, size_t element_size,
                     Visit visit) {
  int64_t count = shape_numel(shape);
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t linear = 0; linear < count; ++linear) {
    int64_t offset = 0;
    for (size_t d = 0; d < shape.size(); ++d) offset += index[d] * strides[d];
    visit(linear, static_cast<size_t>(offset) * element_size);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

}  // namespace

void Tensor::copy_from(const Tensor& source) {
  STRATA_CHECK(source.shape_ == shape_ && source.dtype_ == dtype_, "copy {} {} into {} {}",
               dtype_name(source.dtype_), shape_str(source.shape_), dtype_name(dtype_), shape_str(shape_));
  if (!on_host() || !source.on_host()) {
    copy_between_devices(source);
    return;
  }
  if (is_contiguous() && source.is_contiguous()) {
    if (nbytes() > 0) std::memmove(raw(), source.raw(), nbytes());
    return;
  }
  size_t element = dtype_size(dtype_);
  std::vector<size_t> source_offsets;
  source_offsets.reserve(static_cast<size_t>(numel()));
  for_each_offset(source.shape_, source.strides_, element,
                  [&](int64_t, size_t offset) { source_offsets.push_back(offset); });
  auto* source_base = static_cast<const std::byte*>(source.raw());
  auto* target_base = static_cast<std::byte*>(raw());
  for_each_offset(shape_, strides_, element, [&](int64_t linear, size_t offset) {
    std::memcpy(target_base + offset, source_base + source_offsets[static_cast<size_t>(linear)], element);
  });
}

// A device's memory is reached only by its copies: a strided view is copied in runs, the innermost
// dims that both tensors hold contiguously, one device copy per run.
void Tensor::copy_between_devices(const Tensor& source) {
  if (&source.device() != &device() && !source.on_host() && !on_host()) {  // two devices: through the host
    copy_from(source.to_host());
    return;
  }
  size_t inner = shape_.size();
  int64_t run = 1;
  while (inner > 0 && strides_[inner - 1] == run && source.strides_[inner - 1] == run) {
    run *= shape_[inner - 1];
    --inner;
  }
  const Shape outer(shape_.begin(), shape_.begin() + static_cast<std::ptrdiff_t>(inner));
  const std::vector<int64_t> target_strides(strides_.begin(), strides_.begin() + static_cast<std::ptrdiff_t>(inner));
  const std::vector<int64_t> source_strides(source.strides_.begin(),
                                            source.strides_.begin() + static_cast<std::ptrdiff_t>(inner));
  const size_t element = dtype_size(dtype_);
  const size_t run_bytes = static_cast<size_t>(run) * element;
  std::vector<size_t> source_offsets;
  for_each_offset(outer, source_strides, element, [&](int64_t, size_t offset) { source_offsets.push_back(offset); });
  for_each_offset(outer, target_strides, element, [&](int64_t index, size_t offset) {
    const size_t from = source.offset_bytes_ + source_offsets[static_cast<size_t>(index)];
    const size_t to = offset_bytes_ + offset;
    if (source.on_host()) {
      device().copy_from_host(source.buffer_->data() + from, *buffer_, to, run_bytes);
    } else if (on_host()) {
      source.device().copy_to_host(*source.buffer_, from, buffer_->data() + to, run_bytes);
    } else {
      device().copy(*source.buffer_, from, *buffer_, to, run_bytes);
    }
  });
}

Tensor Tensor::clone() const {
  Tensor copy = empty(shape_, dtype_, device());
  copy.copy_from(*this);
  return copy;
}

Tensor Tensor::host_copy() const {
  Tensor copy = empty(shape_, dtype_);
  copy.copy_from(*this);
  return copy;
}

Tensor Tensor::to_device(const Device& target) const {
  if (&target == &device()) return *this;
  Tensor copy = empty(shape_, dtype_, target);
  copy.copy_from(*this);
  return copy;
}

void Tensor::fill_zero() {
  if (!on_host()) {
    STRATA_CHECK(is_contiguous(), "fill_zero of a strided tensor on device '{}'", device().name());
    device().fill_zero(*buffer_, offset_bytes_, nbytes());
    return;
  }
  if (is_contiguous()) {
    if (nbytes() > 0) std::memset(raw(), 0, nbytes());
    return;
  }
  size_t element = dtype_size(dtype_);
  auto* base = static_cast<std::byte*>(raw());
  for_each_offset(shape_, strides_, element,
                  [&](int64_t, size_t offset) { std::memset(base + offset, 0, element); });
}

namespace {

double load_as_double(const void* data, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::F64: return static_cast<const double*>(data)[index];
    case DType::F32: return static_cast<const float*>(data)[index];
    case DType::BF16: return bf16_to_float(static_cast<const bf16*>(data)[index]);
    case DType::F16: return fp16_to_float(static_cast<const fp16*>(data)[index]);
    case DType::I32: return static_cast<const int32_t*>(data)[index];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(data)[index]);
  }
  return 0;
}

void store_from_double(void* data, DType dtype, int64_t index, double value) {
  switch (dtype) {
    case DType::F64: static_cast<double*>(data)[index] = value; break;
    case DType::F32: static_cast<float*>(data)[index] = static_cast<float>(value); break;
    case DType::BF16: static_cast<bf16*>(data)[index] = float_to_bf16(static_cast<float>(value)); break;
    case DType::F16: static_cast<fp16*>(data)[index] = float_to_fp16(static_cast<float>(value)); break;
    case DType::I32: static_cast<int32_t*>(data)[index] = static_cast<int32_t>(value); break;
    case DType::I64: static_cast<int64_t*>(data)[index] = static_cast<int64_t>(value); break;
  }
}

}  // namespace

Tensor Tensor::to(DType dtype) const {
  Tensor source = is_contiguous() ? *this : clone();
  Tensor result = empty(shape_, dtype);
  int64_t count = numel();
  if (dtype == dtype_) {
    result.copy_from(source);
    return result;
  }
  for (int64_t i = 0; i < count; ++i) {
    store_from_double(result.raw(), dtype, i, load_as_double(source.raw(), dtype_, i));
  }
  return result;
}

double Tensor::item() const {
  STRATA_CHECK(numel() == 1, "item() of a tensor with {} elements", numel());
  return load_as_double(raw(), dtype_, 0);
}

}  // namespace strata
