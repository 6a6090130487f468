// bf16_dot.h's element helpers that the bf16 attention kernels build on,
// against independent references, where the CPU has AVX-512 BF16: exp2_16
// against std::exp2 in double (relative error within 3e-7, the polynomial's
// fitted 9.2e-8 plus its f32 evaluation; whole powers exact; 0 for masked
// lanes and below the f32 range); store_bf16_exact against core/dtype.h's
// rounding bit for bit, ties, NaNs, infinities and subnormals (which
// vcvtneps2bf16 would flush) included.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/cpu/bf16_dot.h"
#include "core/rng.h"

// GCC 12 reports its own AVX-512 intrinsics (_mm512_undefined_* inside
// shifts and conversions) as uninitialised once inlined: GCC bug 105593.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace strata::testing {
namespace {

STRATA_BF16_DOT void exp2_lanes(const float* x, __mmask16 lanes, float* y) {
  _mm512_storeu_ps(y, cpu::exp2_16(lanes, _mm512_loadu_ps(x)));
}

STRATA_BF16_DOT void round_lanes(const float* x, __mmask16 lanes, bf16* y) {
  cpu::store_bf16_exact(y, _mm512_loadu_ps(x), lanes);
}

TEST(Bf16Dot, Exp2MatchesExp2InDouble) {
  if (!cpu::has_bf16_dot()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  double worst = 0;
  float x[16], y[16];
  for (int64_t step = 0; step < 40000; step += 16) {
    for (int64_t i = 0; i < 16; ++i) x[i] = -60.0f + 0.0017f * static_cast<float>(step + i);  // [-60, 8)
    exp2_lanes(x, 0xffff, y);
    for (int64_t i = 0; i < 16; ++i) {
      const double expected = std::exp2(static_cast<double>(x[i]));
      worst = std::max(worst, std::fabs(y[i] - expected) / expected);
    }
  }
  EXPECT_LE(worst, 3e-7);
  for (int64_t i = 0; i < 16; ++i) x[i] = i < 8 ? -200.0f - static_cast<float>(i) : -1e30f;
  exp2_lanes(x, 0xffff, y);
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(y[i], 0.0f) << "2^" << x[i];
  for (int64_t i = 0; i < 16; ++i) x[i] = static_cast<float>(i - 12);
  exp2_lanes(x, 0x7fff, y);
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(y[i], i < 15 ? std::ldexp(1.0f, i - 12) : 0.0f) << "lane " << i;
}

TEST(Bf16Dot, StoreBf16ExactRoundsAsCoreDtype) {
  if (!cpu::has_bf16_dot()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.5f, std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                               std::bit_cast<float>(0x7f800001u),  // a signalling NaN, made quiet
                               std::bit_cast<float>(0x00000001u),  // the smallest subnormal
                               std::bit_cast<float>(0x00418000u),  // a subnormal tie to even, kept
                               std::bit_cast<float>(0x3f808000u),  // a tie down to even
                               std::bit_cast<float>(0x3f818000u),  // a tie up to even
                               std::bit_cast<float>(0x7f7fffffu),  // the largest float, rounds to inf
                               std::numeric_limits<float>::min()};
  for (uint32_t i = 0; values.size() % 16 != 0 || values.size() < 4096; ++i) {  // random bit patterns
    values.push_back(std::bit_cast<float>(philox4x32({i, 0, 0, 0}, {11, 0})[0]));
  }
  bf16 out[16];
  for (size_t first = 0; first < values.size(); first += 16) {
    round_lanes(values.data() + first, 0xffff, out);
    for (size_t i = 0; i < 16; ++i) {
      EXPECT_EQ(out[i].bits, float_to_bf16(values[first + i]).bits)
          << "bits " << std::hex << std::bit_cast<uint32_t>(values[first + i]);
    }
  }
  bf16 kept[16];
  for (bf16& value : kept) value.bits = 0x1234;
  round_lanes(values.data(), 0x0003, kept);
  EXPECT_EQ(kept[2].bits, 0x1234) << "a lane outside the mask was written";
}

}  // namespace
}  // namespace strata::testing
