#pragma once
// Helpers the op families' schemas share (standard_ops.cpp, fused_ops.cpp, llama_ops.cpp, the attention
// files): element counts, the dtype of row statistics, shape pieces, and input checks whose message
// names the op and the input.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "ops/schema.h"

namespace strata::schema_checks {

inline double count(const TensorMeta& meta) { return static_cast<double>(shape_numel(meta.shape)); }

// Row statistics (norm means, softmax log-sum-exp) are kept in f32, or f64 when the data itself is f64
// (finite-difference checks).
inline DType stats_dtype(DType data) { return data == DType::F64 ? DType::F64 : DType::F32; }

inline Shape drop_last(const Shape& shape) { return Shape(shape.begin(), shape.end() - 1); }

inline bool is_suffix(const Shape& suffix, const Shape& shape) {
  if (suffix.size() > shape.size()) return false;
  return std::equal(suffix.begin(), suffix.end(), shape.end() - static_cast<std::ptrdiff_t>(suffix.size()));
}

// Fails with "op 'OP': input 'INPUT' must REQUIREMENT, got DTYPE SHAPE" unless `condition`.
inline void expect(bool condition, const std::string& op, const std::string& input, const std::string& requirement,
                   const TensorMeta& meta) {
  if (!condition) {
    fail("op '{}': input '{}' must {}, got {} {}", op, input, requirement, dtype_name(meta.dtype),
         shape_str(meta.shape));
  }
}

inline void expect_floating(const std::string& op, const std::string& input, const TensorMeta& meta) {
  if (!is_floating(meta.dtype)) {
    fail("op '{}': input '{}' must be floating point, got {}", op, input, dtype_name(meta.dtype));
  }
}

}  // namespace strata::schema_checks
