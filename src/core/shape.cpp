#include "core/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace strata {

int64_t shape_numel(const Shape& shape) {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  return count;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

}  // namespace strata
