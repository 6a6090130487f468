#pragma once
// The square_sum_exact inputs that the cpu tests (square_sum_exact_test.cpp)
// and the opencl tests (opencl_reductions_test.cpp) share.
#include <cmath>
#include <limits>

#include "cpu_test_util.h"

namespace strata::testing {

// Normal values whose magnitudes span ~60 decades, so most 4096-value blocks
// hold squares both above and below 2^-80 of their largest (cpu's fixed-point
// words and ref's scalar bins); every 97th value is zero, every 1009th
// subnormal.
inline Tensor wide_ranging(int64_t count, uint64_t seed) {
  Tensor x = random_f32({count}, seed);
  float* values = x.data<float>();
  for (int64_t i = 0; i < count; ++i) {
    const auto octaves = static_cast<int>((i * 2654435761u) % 200) - 120;
    values[i] = std::ldexp(values[i], octaves);
    if (i % 97 == 0) values[i] = 0.0f;
    if (i % 1009 == 0) values[i] = std::numeric_limits<float>::denorm_min() * static_cast<float>(i % 5000 + 1);
  }
  return x;
}

}  // namespace strata::testing
