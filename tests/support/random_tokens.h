#pragma once
// Token ids for model tests: uniform in [0, vocab), a pure function of `stream`.
#include <cstdint>

#include "core/rng.h"
#include "core/tensor.h"

namespace strata::testing {

inline Tensor random_token_ids(const Shape& shape, uint64_t stream, int64_t vocab) {
  Tensor ids = Tensor::empty(shape, DType::I32);
  const CounterRng rng(11);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    ids.data<int32_t>()[i] = static_cast<int32_t>(static_cast<double>(rng.uniform(stream, static_cast<uint64_t>(i))) *
                                                  static_cast<double>(vocab)) %
                             static_cast<int32_t>(vocab);
  }
  return ids;
}

}  // namespace strata::testing
