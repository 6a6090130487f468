// simd.h's transpose16 (the f32 attention forward's transposed queries)
// against the index formula, on distinct values so that any misplaced
// element shows.
#include <gtest/gtest.h>

#include "backends/cpu/simd.h"

namespace strata::testing {
namespace {

TEST(SimdTranspose, SixteenRowsBecomeSixteenColumns) {
  cpu::f32x16 rows[16];
  float values[16][16];
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) values[r][c] = static_cast<float>(100 * r + c) + 0.25f;
    cpu::load16(&rows[r], values[r]);
  }
  cpu::transpose16(rows);
  for (int c = 0; c < 16; ++c) {
    float column[16];
    cpu::store16(column, &rows[c]);
    for (int r = 0; r < 16; ++r) EXPECT_EQ(column[r], values[r][c]) << "row " << r << ", column " << c;
  }
}

}  // namespace
}  // namespace strata::testing
