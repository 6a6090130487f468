// The attention kernels' strip products (tile_gemm.h): the 16-float blocks taken on AVX-512 CPUs and the 8-float
// ones taken elsewhere give the same bits on every CPU, and match sums in double, for a transposed and a plain a,
// every block width a strip is cut into, accumulating or not.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backends/cpu/tile_gemm.h"
#include "core/rng.h"

namespace strata::cpu {
namespace {

std::vector<float> random_values(size_t count, uint64_t seed) {
  std::vector<float> values(count);
  fill_normal(values.data(), static_cast<int64_t>(count), CounterRng(seed), 0, 0.0f, 1.0f);
  return values;
}

TEST(TileGemm, WideAndNarrowStripsGiveTheSameBitsAndMatchDoubleSums) {
  constexpr int64_t kDepth = 37;
  for (const int64_t cols : {16, 32, 48, 64, 112, 128}) {
    for (const bool transposed_a : {false, true}) {
      for (const bool accumulate : {false, true}) {
        const std::vector<float> a = random_values(4 * kDepth, 1), b = random_values(kDepth * cols, 2);
        const std::vector<float> start = random_values(4 * cols, 3);
        const TileA tile = transposed_a ? TileA{a.data(), 1, 4} : TileA{a.data(), kDepth, 1};
        std::vector<float> wide = start, narrow = start;
        tile_strip_wide(cols, kDepth, tile, b.data(), cols, wide.data(), cols, accumulate);
        tile_strip_narrow(cols, kDepth, tile, b.data(), cols, narrow.data(), cols, accumulate);
        for (int64_t r = 0; r < 4; ++r) {
          for (int64_t j = 0; j < cols; ++j) {
            double sum = accumulate ? start[r * cols + j] : 0.0, magnitude = std::abs(sum);
            for (int64_t k = 0; k < kDepth; ++k) {
              const double term = double{tile.data[r * tile.row_stride + k * tile.depth_stride]} * b[k * cols + j];
              sum += term;
              magnitude += std::abs(term);
            }
            const size_t i = static_cast<size_t>(r * cols + j);
            ASSERT_EQ(wide[i], narrow[i]) << "cols " << cols << " row " << r << " column " << j;
            EXPECT_LE(std::abs(wide[i] - sum), kDepth * 0x1p-24 * magnitude) << "cols " << cols << " row " << r;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata::cpu
