#pragma once
// comm-bench's inputs: small integers, so sums over up to hundreds of ranks
// stay exact in f32 and bf16 and every result can be checked exactly.
#include <cstddef>

#include "core/dtype.h"

namespace strata::comm {

inline float bench_pattern(int rank, size_t index) {
  return static_cast<float>(static_cast<long>((index * 7 + static_cast<size_t>(rank) * 13) % 9) - 4);
}

inline float bench_load(const void* data, DType dtype, size_t index) {
  if (dtype == DType::BF16) return bf16_to_float(static_cast<const bf16*>(data)[index]);
  return static_cast<const float*>(data)[index];
}

}  // namespace strata::comm
