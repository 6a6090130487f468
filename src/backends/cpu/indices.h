#pragma once
// Index inputs (token ids, targets) of the cpu kernels: i32 or i64.
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace strata::cpu {

// Fails, naming the op, the input, the position and the value, unless every
// index lies in [0, bound). Kernels check before their parallel loops so an
// error is thrown from the calling thread.
void check_indices(const std::string& op, const std::string& input, const Tensor& ids, int64_t bound);

// Calls body(pointer) with the indices typed as they are stored.
template <typename Body>
void with_indices(const Tensor& ids, const Body& body) {
  if (ids.dtype() == DType::I32) {
    body(ids.data<int32_t>());
  } else {
    body(ids.data<int64_t>());
  }
}

}  // namespace strata::cpu
