#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace strata {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3, 4]"
std::vector<int64_t> contiguous_strides(const Shape& shape);

}  // namespace strata
