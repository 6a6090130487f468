#include "core/tensor_box.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace strata {

TensorBox whole_box(const Shape& shape) { return {std::vector<int64_t>(shape.size(), 0), shape}; }

std::string box_str(const TensorBox& box) {
  std::string text = "[";
  for (size_t d = 0; d < box.offsets.size(); ++d) {
    text += fmt::format("{}{}:{}", d ? ", " : "", box.offsets[d], box.offsets[d] + box.lengths[d]);
  }
  return text + "]";
}

bool box_within(const TensorBox& box, const Shape& shape) {
  if (box.offsets.size() != shape.size() || box.lengths.size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (box.offsets[d] < 0 || box.lengths[d] < 0 || box.offsets[d] > shape[d] - box.lengths[d]) return false;
  }
  return true;
}

std::optional<TensorBox> intersect(const TensorBox& a, const TensorBox& b) {
  STRATA_CHECK(a.offsets.size() == b.offsets.size(), "boxes {} and {} of different ranks", box_str(a), box_str(b));
  TensorBox common;
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    const int64_t begin = std::max(a.offsets[d], b.offsets[d]);
    const int64_t end = std::min(a.offsets[d] + a.lengths[d], b.offsets[d] + b.lengths[d]);
    if (end <= begin) return std::nullopt;
    common.offsets.push_back(begin);
    common.lengths.push_back(end - begin);
  }
  return common;
}

std::optional<int64_t> contiguous_start(const Shape& shape, const std::vector<int64_t>& offsets,
                                        const std::vector<int64_t>& lengths) {
  // Contiguous when, past some dim k, every dim is whole and before it every dim is one index.
  size_t k = 0;
  while (k < shape.size() && lengths[k] == 1) ++k;
  for (size_t d = k + 1; d < shape.size(); ++d) {
    if (offsets[d] != 0 || lengths[d] != shape[d]) return std::nullopt;
  }
  int64_t start = 0;
  const std::vector<int64_t> strides = contiguous_strides(shape);
  for (size_t d = 0; d < shape.size(); ++d) start += offsets[d] * strides[d];
  return start;
}

void copy_box(const void* from, const Shape& from_shape, const std::vector<int64_t>& from_offsets, void* to,
              const Shape& to_shape, const std::vector<int64_t>& to_offsets, const std::vector<int64_t>& lengths,
              size_t element_bytes) {
  const size_t rank = lengths.size();
  STRATA_CHECK(box_within({from_offsets, lengths}, from_shape) && box_within({to_offsets, lengths}, to_shape),
               "a box of {} at {} in {} copied to {} in {}", shape_str(lengths), shape_str(from_offsets),
               shape_str(from_shape), shape_str(to_offsets), shape_str(to_shape));
  if (shape_numel(lengths) == 0) return;
  if (rank == 0) {
    std::memcpy(to, from, element_bytes);
    return;
  }
  // Rows along the last dim are contiguous in both; walk every other index.
  const std::vector<int64_t> from_strides = contiguous_strides(from_shape), to_strides = contiguous_strides(to_shape);
  const size_t row_bytes = static_cast<size_t>(lengths[rank - 1]) * element_bytes;
  std::vector<int64_t> index(rank, 0);
  const auto* source = static_cast<const char*>(from);
  auto* target = static_cast<char*>(to);
  while (true) {
    int64_t from_at = 0, to_at = 0;
    for (size_t d = 0; d < rank; ++d) {
      from_at += (from_offsets[d] + index[d]) * from_strides[d];
      to_at += (to_offsets[d] + index[d]) * to_strides[d];
    }
    std::memcpy(target + static_cast<size_t>(to_at) * element_bytes,
                source + static_cast<size_t>(from_at) * element_bytes, row_bytes);
    size_t d = rank - 1;  // the next row: count up the dims before the last
    while (d > 0) {
      --d;
      if (++index[d] < lengths[d]) break;
      index[d] = 0;
      if (d == 0) return;
    }
    if (rank == 1) return;
  }
}

void copy_box(const Tensor& from, const std::vector<int64_t>& from_offsets, Tensor& to,
              const std::vector<int64_t>& to_offsets, const std::vector<int64_t>& lengths) {
  STRATA_CHECK(from.dtype() == to.dtype() && from.is_contiguous() && to.is_contiguous(),
               "copy_box between {} and {} tensors (both must be contiguous)", dtype_name(from.dtype()),
               dtype_name(to.dtype()));
  copy_box(from.raw(), from.shape(), from_offsets, to.raw(), to.shape(), to_offsets, lengths, dtype_size(from.dtype()));
}

}  // namespace strata
