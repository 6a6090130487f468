#pragma once
// The rope shapes and attributes that the cpu tests (llama_kernels_test.cpp)
// and the opencl tests (opencl_llama_test.cpp) share.
#include "cpu_test_util.h"

namespace strata::testing {

struct RopeShape {
  int64_t batch, seq, heads, head_dim;
};

// D = 64 and 80 (D/2 = 40: a partial vector), up to 7 rows per batch row, 2 and 3 heads; 20 heads of 64 (the
// cpu's bf16 rows take 16 heads at a time: a group and a part) and D = 1040 (a head wider than such a group).
inline const RopeShape kRopeShapes[] = {{2, 7, 3, 64}, {1, 5, 3, 80}, {3, 1, 2, 80}, {1, 3, 20, 64}, {1, 2, 2, 1040}};

// LLaMA 3's rope: theta 5e5 and its long-context frequency scaling.
inline Attrs llama3_rope(int64_t head_dim, bool inverse) {
  return {{"head_dim", head_dim},    {"theta", 5e5},
          {"scaling", "llama3"},     {"factor", 8.0},
          {"low_freq_factor", 1.0},  {"high_freq_factor", 4.0},
          {"original_max_positions", int64_t{8192}}, {"inverse", inverse}};
}

// i32 positions start, start + 3, ... for `seq` rows.
inline Tensor rope_positions(int64_t seq, int64_t start) {
  Tensor tensor = Tensor::empty({seq}, DType::I32);
  for (int64_t t = 0; t < seq; ++t) tensor.data<int32_t>()[t] = static_cast<int32_t>(start + 3 * t);
  return tensor;
}

}  // namespace strata::testing
