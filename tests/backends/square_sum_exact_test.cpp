// square_sum_exact: cpu (threads merging in any order) and ref give the same
// bins, for f32 and bf16; the bins of pieces merge to the bins of the whole;
// the value agrees with an f64 sum of the squares (which errs by ~n ulps).
// cpu cuts each block's squares into fixed-point words (two where the block's
// values span at most 16 binades, else three) and leaves the squares far below
// its block's largest to ref's scalar bins: the cases below put values on both
// sides of those lines.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <omp.h>

#include "core/exact_square_sum.h"
#include "cpu_test_util.h"
#include "wide_ranging_values.h"

namespace strata::testing {
namespace {

ExactSquareSum bins_of(const Tensor& words) { return ExactSquareSum::from_words(words.data<int64_t>()); }

TEST(SquareSumExact, CpuAndRefGiveTheSameBinsForF32AndBf16AtAnyThreadCount) {
  Tensor x = random_f32({5, 70001}, 21, 3.0f);  // several parallel blocks
  for (DType dtype : {DType::F32, DType::BF16}) {
    Tensor input = x.to(dtype);
    Tensor ref = run_on("ref", "square_sum_exact", {input})[0];
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      expect_identical(run_on("cpu", "square_sum_exact", {input})[0], ref,
                       std::string(dtype_name(dtype)) + " at " + std::to_string(threads) + " threads");
    }
    double f64_sum = 0;
    Tensor wide = input.to(DType::F64);
    for (int64_t i = 0; i < wide.numel(); ++i) f64_sum += wide.data<double>()[i] * wide.data<double>()[i];
    EXPECT_NEAR(bins_of(ref).value(), f64_sum, 1e-12 * f64_sum) << dtype_name(dtype);
  }
}

TEST(SquareSumExact, PiecesOfATensorMergeToTheWhole) {
  Tensor x = random_f32({100000}, 22).reshape({100000});
  ExactSquareSum pieces;
  for (auto [begin, length] : {std::pair<int64_t, int64_t>{0, 3}, {3, 40000}, {40003, 59996}, {99999, 1}}) {
    pieces.merge(bins_of(run_on("cpu", "square_sum_exact", {x.narrow(0, begin, length)})[0]));
  }
  EXPECT_EQ(pieces.words(), bins_of(run_on("cpu", "square_sum_exact", {x})[0]).words());
}

TEST(SquareSumExact, CpuGivesRefsBinsWhereSquaresFallBelowTheBlocksFixedPointWords) {
  // Lengths off every multiple: of the 8 lanes, of a 4096-value block, of a thread's range.
  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{4097}, int64_t{32768 + 3}, int64_t{200003}}) {
    Tensor x = wide_ranging(count, 31 + static_cast<uint64_t>(count));
    for (DType dtype : {DType::F32, DType::BF16}) {
      Tensor input = x.to(dtype);
      Tensor ref = run_on("ref", "square_sum_exact", {input})[0];
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        expect_identical(run_on("cpu", "square_sum_exact", {input})[0], ref,
                         std::to_string(count) + " " + std::string(dtype_name(dtype)) + " values at " +
                             std::to_string(threads) + " threads");
      }
    }
  }
}

// Odd mantissas of `bits` bits after the point (every square has its lowest bit set) in binades
// top - span .. top, each 4096-value block holding both ends.
Tensor spanning_binades(int bits, int span, int top, uint64_t seed) {
  Tensor x = random_f32({3 * 4096 + 5}, seed);
  float* values = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const auto fraction = static_cast<uint32_t>((i * 2654435761u) % (1u << bits)) | 1u | (1u << bits);
    const float mantissa = std::ldexp(static_cast<float>(fraction), -bits);
    const int binade = i % 4096 == 0 ? top : i % 4096 == 1 ? top - span : top - static_cast<int>(i % (span + 1));
    values[i] = std::copysign(std::ldexp(mantissa, binade), values[i]);
  }
  return x;
}

TEST(SquareSumExact, CpuGivesRefsBinsForBlocksSpanningSixteenBinadesAndSeventeen) {
  // Full 24-bit mantissas, at magnitudes from near the smallest normal to near the largest.
  for (int span : {15, 16, 17}) {
    for (int top : {-100, 0, 100}) {
      Tensor x = spanning_binades(23, span, top, 51 + static_cast<uint64_t>(span));
      Tensor ref = run_on("ref", "square_sum_exact", {x})[0];
      expect_identical(run_on("cpu", "square_sum_exact", {x})[0], ref,
                       "span " + std::to_string(span) + " below 2^" + std::to_string(top + 1));
    }
  }
}

// bf16 values (8-bit mantissas) in f32 and as bf16: two words hold their squares up to 32 binades.
// A block with one full-mantissa value among them spans too far for two words.
TEST(SquareSumExact, CpuGivesRefsBinsForBlocksOfBf16ValuesSpanningThirtyTwoBinadesAndThirtyThree) {
  for (int span : {31, 32, 33}) {
    for (int top : {-90, 0, 100}) {
      for (bool one_full_mantissa : {false, true}) {
        Tensor x = spanning_binades(7, span, top, 61 + static_cast<uint64_t>(span));
        if (one_full_mantissa) x.data<float>()[4096 + 7] = std::nextafter(x.data<float>()[4096 + 7], 0.0f);
        const std::string what = "span " + std::to_string(span) + " below 2^" + std::to_string(top + 1) +
                                 (one_full_mantissa ? ", one full mantissa" : "");
        for (DType dtype : {DType::F32, DType::BF16}) {
          if (dtype == DType::BF16 && one_full_mantissa) continue;
          Tensor input = x.to(dtype);
          Tensor ref = run_on("ref", "square_sum_exact", {input})[0];
          expect_identical(run_on("cpu", "square_sum_exact", {input})[0], ref,
                           what + " in " + std::string(dtype_name(dtype)));
        }
      }
    }
  }
}

TEST(SquareSumExact, CpuCountsInfinitiesAndNansAndKeepsTheFiniteBlocksExact) {
  Tensor x = wide_ranging(3 * 4096, 41);
  x.data<float>()[5] = std::numeric_limits<float>::infinity();
  x.data<float>()[4096 + 9] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[4096 + 10] = -std::numeric_limits<float>::infinity();
  Tensor ref = run_on("ref", "square_sum_exact", {x})[0];
  expect_identical(run_on("cpu", "square_sum_exact", {x})[0], ref, "blocks with an infinity or a NaN");
  EXPECT_EQ(ref.data<int64_t>()[ExactSquareSum::kWords - 2], 2);
  EXPECT_EQ(ref.data<int64_t>()[ExactSquareSum::kWords - 1], 1);
}

// Also about 2^-88 and 2^-87, where blocks leave the two words' path (its scale, an f32 power of two, would
// pass f32's range below), in f32 and bf16.
TEST(SquareSumExact, CpuHandlesBlocksOfOnlyTinyOrOnlyHugeValues) {
  for (float magnitude : {std::numeric_limits<float>::denorm_min() * 3.0f, std::numeric_limits<float>::min(),
                          0x1p-88f, 0x1p-87f, 1e-30f, 1e30f, std::numeric_limits<float>::max()}) {
    Tensor x = random_f32({5008}, 43);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = std::fabs(x.data<float>()[i]) < 3.0f ? x.data<float>()[i] * magnitude / 3.0f : magnitude;
    for (const Tensor& values : {x, x.to(DType::BF16)}) {
      Tensor ref = run_on("ref", "square_sum_exact", {values})[0];
      expect_identical(run_on("cpu", "square_sum_exact", {values})[0], ref,
                       std::string(dtype_name(values.dtype())) + " values near " + std::to_string(magnitude));
    }
  }
}

TEST(SquareSumExact, RefusesOtherDtypesNamingTheInput) {
  try {
    run_on("ref", "square_sum_exact", {random_f32({4}, 23).to(DType::F64)});
    FAIL() << "f64 accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("op 'square_sum_exact': input 'x' must be f32 or bf16, got f64"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace strata::testing
