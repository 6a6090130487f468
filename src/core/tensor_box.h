#pragma once
// A box of a tensor: per dim an offset and a length. A checkpoint stores each
// global tensor as boxes (pieces) that the ranks holding them wrote, and a
// rank of any layout reads the parts of those boxes that its shards cover.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/shape.h"
#include "core/tensor.h"

namespace strata {

struct TensorBox {
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;
  int64_t numel() const { return shape_numel(lengths); }
  bool operator==(const TensorBox&) const = default;
};

TensorBox whole_box(const Shape& shape);
std::string box_str(const TensorBox& box);  // "[0:4, 8:16]": [begin:end) per dim
// Every offset non-negative and every box end within `shape` (of the same rank).
bool box_within(const TensorBox& box, const Shape& shape);
// The common part of two boxes of the same rank, if they share an element.
std::optional<TensorBox> intersect(const TensorBox& a, const TensorBox& b);

// Where a box of an array of `shape` starts (in elements, row-major), when its
// elements are one contiguous run there; nothing otherwise.
std::optional<int64_t> contiguous_start(const Shape& shape, const std::vector<int64_t>& offsets,
                                        const std::vector<int64_t>& lengths);

// Copies a block of `lengths` elements of `element_bytes` each from the
// contiguous array `from` (of shape `from_shape`), starting at `from_offsets`,
// into the contiguous array `to` (of shape `to_shape`) at `to_offsets`.
void copy_box(const void* from, const Shape& from_shape, const std::vector<int64_t>& from_offsets, void* to,
              const Shape& to_shape, const std::vector<int64_t>& to_offsets, const std::vector<int64_t>& lengths,
              size_t element_bytes);
// The same between contiguous tensors of one dtype.
void copy_box(const Tensor& from, const std::vector<int64_t>& from_offsets, Tensor& to,
              const std::vector<int64_t>& to_offsets, const std::vector<int64_t>& lengths);

}  // namespace strata
