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
#include <cstring>

#include "backends/cpu/simd.h"

namespace strata::cpu {

// a[r, k] is data[r * row_stride + k * depth_stride].
struct TileA {
  const float* data;
  int64_t row_stride;
  int64_t depth_stride;
};

// One 4 x (lanes * kVectors) block of c, held in registers across the depth.
template <typename Vector, int kVectors>
__attribute__((always_inline)) inline void tile_block(int64_t depth, TileA a, const float* b, int64_t ldb, float* c,
                                                      int64_t ldc, bool accumulate) {
  constexpr int kLanes = sizeof(Vector) / sizeof(float);
  Vector acc[4][kVectors];
  for (int r = 0; r < 4; ++r) {
    for (int v = 0; v < kVectors; ++v) {
      if (accumulate) {
        std::memcpy(&acc[r][v], c + r * ldc + kLanes * v, sizeof(Vector));
      } else {
        acc[r][v] = Vector{};
      }
    }
  }
  for (int64_t k = 0; k < depth; ++k) {
    Vector bv[kVectors];
    for (int v = 0; v < kVectors; ++v) std::memcpy(&bv[v], b + k * ldb + kLanes * v, sizeof(Vector));
    for (int r = 0; r < 4; ++r) {
      float scalar = a.data[r * a.row_stride + k * a.depth_stride];
      for (int v = 0; v < kVectors; ++v) acc[r][v] += scalar * bv[v];
    }
  }
  for (int r = 0; r < 4; ++r) {
    for (int v = 0; v < kVectors; ++v) std::memcpy(c + r * ldc + kLanes * v, &acc[r][v], sizeof(Vector));
  }
}

// Blocks of up to 64 columns in 16-float vectors, for CPUs with AVX-512.
__attribute__((always_inline)) inline void tile_strip_wide(int64_t cols, int64_t depth, TileA a, const float* b,
                                                           int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  int64_t col = 0;
  for (; col + 64 <= cols; col += 64) tile_block<f32x16, 4>(depth, a, b + col, ldb, c + col, ldc, accumulate);
  for (; col + 32 <= cols; col += 32) tile_block<f32x16, 2>(depth, a, b + col, ldb, c + col, ldc, accumulate);
  if (col < cols) tile_block<f32x16, 1>(depth, a, b + col, ldb, c + col, ldc, accumulate);
}

// Blocks of 16 columns in 8-float vectors, for the rest: 16-float blocks need more than the 16 registers AVX2
// has, and GCC then keeps them in memory (the f32 attention ran at 3 GFLOP/s a thread on an AVX2 EPYC).
__attribute__((always_inline)) inline void tile_strip_narrow(int64_t cols, int64_t depth, TileA a, const float* b,
                                                             int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  for (int64_t col = 0; col < cols; col += 16) {
    tile_block<f32x8, 2>(depth, a, b + col, ldb, c + col, ldc, accumulate);
  }
}

// Every element sums its depth in the same order in either form, so the two give the same bits.
__attribute__((always_inline)) inline void tile_strip(int64_t cols, int64_t depth, TileA a, const float* b,
                                                      int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  if (has_avx512()) {
    tile_strip_wide(cols, depth, a, b, ldb, c, ldc, accumulate);
  } else {
    tile_strip_narrow(cols, depth, a, b, ldb, c, ldc, accumulate);
  }
}

}  // namespace strata::cpu
