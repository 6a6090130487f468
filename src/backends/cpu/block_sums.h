#pragma once
// The last pass of the column reductions: the norms' weight gradients
// (cpu_layernorm.cpp and the fused forms through layernorm_rows.h,
// cpu_rms_norm.cpp; f32 partials) and sum_to's (cpu_reductions.cpp; f64
// partials). Each fixed block of rows left partial sums per column; they are
// added in block order in f64, so results do not depend on the thread count.
#include <cstdint>

#include "backends/cpu/convert.h"
#include "backends/cpu/simd.h"

namespace strata::cpu {

inline constexpr int64_t kPartialColumns = 1024;  // columns per call of sum_block_partials

// Internal linkage: each including file gets its own clones and resolvers
// rather than target_clones symbols merged across translation units.
namespace {

// out[c] = the partials of column c (block b's at partials[b * stride + c])
// added in block order from 0.0 in f64, for c in [begin, end) (at most
// kMaxColumns). Blocks outer, columns inner: the partials are read in order,
// a vector of columns at a time, rather than one column at a time a block's
// stride apart.
template <int64_t kMaxColumns = kPartialColumns, typename P, typename X>
STRATA_CPU_CLONES void sum_block_partials(const P* partials, int64_t blocks, int64_t stride, int64_t begin,
                                          int64_t end, X* out) {
  double totals[kMaxColumns];
  const int64_t columns = end - begin;
  for (int64_t c = 0; c < columns; ++c) totals[c] = 0.0;
  for (int64_t block = 0; block < blocks; ++block) {
    const P* row = partials + block * stride + begin;
#pragma omp simd
    for (int64_t c = 0; c < columns; ++c) totals[c] += static_cast<double>(row[c]);
  }
  for (int64_t c = 0; c < columns; ++c) out[begin + c] = from_f32<X>(static_cast<float>(totals[c]));
}

}  // namespace

}  // namespace strata::cpu
