#include "backends/ref/ref_io.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace strata::ref {

namespace {

template <typename T>
std::vector<double> load_as(const Tensor& tensor) {
  const T* data = tensor.data<T>();
  std::vector<double> values(static_cast<size_t>(tensor.numel()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = to_double(data[i]);
  return values;
}

template <typename T>
void store_as(const Tensor& tensor, const std::vector<double>& values) {
  T* data = tensor.data<T>();
  for (size_t i = 0; i < values.size(); ++i) data[i] = from_double<T>(values[i]);
}

// The multi-index of element `flat` of a contiguous tensor, e.g. "[1, 3]".
std::string position_str(const Shape& shape, int64_t flat) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return fmt::format("[{}]", fmt::join(index, ", "));
}

}  // namespace

std::vector<double> load(const Tensor& tensor) {
  STRATA_CHECK(tensor.is_contiguous(), "ref kernels take contiguous tensors");
  switch (tensor.dtype()) {
    case DType::F64: return load_as<double>(tensor);
    case DType::F32: return load_as<float>(tensor);
    case DType::BF16: return load_as<bf16>(tensor);
    case DType::F16: return load_as<fp16>(tensor);
    default: break;
  }
  STRATA_CHECK(false, "ref load of a {} tensor as floating point", dtype_name(tensor.dtype()));
  return {};
}

void store(const Tensor& tensor, const std::vector<double>& values) {
  STRATA_CHECK(tensor.is_contiguous(), "ref kernels take contiguous tensors");
  STRATA_CHECK(static_cast<int64_t>(values.size()) == tensor.numel(), "store of {} values into {}", values.size(),
               shape_str(tensor.shape()));
  switch (tensor.dtype()) {
    case DType::F64: return store_as<double>(tensor, values);
    case DType::F32: return store_as<float>(tensor, values);
    case DType::BF16: return store_as<bf16>(tensor, values);
    case DType::F16: return store_as<fp16>(tensor, values);
    default: break;
  }
  STRATA_CHECK(false, "ref store into a {} tensor", dtype_name(tensor.dtype()));
}

double round_to(DType dtype, double value) {
  switch (dtype) {
    case DType::F64: return value;
    case DType::F32: return static_cast<double>(static_cast<float>(value));
    case DType::BF16: return to_double(from_double<bf16>(value));
    case DType::F16: return to_double(from_double<fp16>(value));
    default: break;
  }
  STRATA_CHECK(false, "rounding to {}", dtype_name(dtype));
  return value;
}

std::vector<int64_t> load_indices(const Tensor& tensor) {
  STRATA_CHECK(tensor.is_contiguous(), "ref kernels take contiguous tensors");
  size_t count = static_cast<size_t>(tensor.numel());
  if (tensor.dtype() == DType::I64) {
    const int64_t* data = tensor.data<int64_t>();
    return std::vector<int64_t>(data, data + count);
  }
  const int32_t* data = tensor.data<int32_t>();
  return std::vector<int64_t>(data, data + count);
}

void check_indices(const std::string& op, const std::string& input, const Tensor& tensor,
                   const std::vector<int64_t>& indices, int64_t bound) {
  for (size_t p = 0; p < indices.size(); ++p) {
    if (indices[p] < 0 || indices[p] >= bound) {
      fail("op '{}': input '{}' holds {} at position {}, outside [0, {})", op, input, indices[p],
           position_str(tensor.shape(), static_cast<int64_t>(p)), bound);
    }
  }
}

void add_float_kernels(Backend& backend, const std::string& op, const KernelFn& kernel) {
  for (DType dtype : {DType::F64, DType::F32, DType::BF16, DType::F16}) backend.add_kernel(op, dtype, kernel);
}

}  // namespace strata::ref
