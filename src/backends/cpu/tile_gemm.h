#pragma once
// The small matrix products inside the attention kernels, on tiles already in
// cache, one strip of 4 rows at a time (callers skip strips or shorten them
// where the causal mask allows):
//   c[4, cols] (+)= a[4, depth] b[depth, cols]
// a is read through two strides, so a transposed tile costs nothing; rows of
// b and c are contiguous; cols must be a multiple of 16 (callers pad their
// tiles). Always inlined, so it is compiled for the instruction set of the
// kernel clone that uses it.
#include <cstdint>

#include "backends/cpu/simd.h"

namespace strata::cpu {

// a[r, k] is data[r * row_stride + k * depth_stride].
struct TileA {
  const float* data;
  int64_t row_stride;
  int64_t depth_stride;
};

// One 4 x (16 * kVectors) block of c, held in registers across the depth.
template <int kVectors>
__attribute__((always_inline)) inline void tile_block(int64_t depth, TileA a, const float* b, int64_t ldb, float* c,
                                                      int64_t ldc, bool accumulate) {
  f32x16 acc[4][kVectors];
  for (int r = 0; r < 4; ++r) {
    for (int v = 0; v < kVectors; ++v) {
      if (accumulate) {
        load16(&acc[r][v], c + r * ldc + 16 * v);
      } else {
        acc[r][v] = f32x16{};
      }
    }
  }
  for (int64_t k = 0; k < depth; ++k) {
    f32x16 bv[kVectors];
    for (int v = 0; v < kVectors; ++v) load16(&bv[v], b + k * ldb + 16 * v);
    for (int r = 0; r < 4; ++r) {
      float scalar = a.data[r * a.row_stride + k * a.depth_stride];
      for (int v = 0; v < kVectors; ++v) acc[r][v] += scalar * bv[v];
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (int v = 0; v < kVectors; ++v) store16(c + r * ldc + 16 * v, &acc[r][v]);
  }
}

__attribute__((always_inline)) inline void tile_strip(int64_t cols, int64_t depth, TileA a, const float* b,
                                                      int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  int64_t col = 0;
  for (; col + 64 <= cols; col += 64) tile_block<4>(depth, a, b + col, ldb, c + col, ldc, accumulate);
  for (; col + 32 <= cols; col += 32) tile_block<2>(depth, a, b + col, ldb, c + col, ldc, accumulate);
  if (col < cols) tile_block<1>(depth, a, b + col, ldb, c + col, ldc, accumulate);
}

}  // namespace strata::cpu
