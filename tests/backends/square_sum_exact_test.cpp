// square_sum_exact: cpu (threads merging in any order) and ref give the same
// bins, for f32 and bf16; the bins of pieces merge to the bins of the whole;
// the value agrees with an f64 sum of the squares (which errs by ~n ulps).
#include <gtest/gtest.h>

#include <cmath>
#include <omp.h>

#include "core/exact_square_sum.h"
#include "cpu_test_util.h"

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
