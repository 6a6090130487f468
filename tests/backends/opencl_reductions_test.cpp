// sum_to, sum_squares and square_sum_exact on the opencl backend. sum_to and sum_squares (compensated
// f32 sums) meet the cpu tests' 1e-6 against ref's f64 sums, on shapes that take one slice and
// many; square_sum_exact gives ref's and cpu's words bit for bit, wherever its values lie, and the
// words of pieces read at their offsets into one buffer merge to the words of the whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/exact_square_sum.h"
#include "cpu_test_util.h"
#include "wide_ranging_values.h"

namespace strata::testing {
namespace {

TEST(OpenCLReductions, SumToMatchesRef) {
  uint64_t seed = 40;
  const auto sum_to = [&](const Shape& shape, const std::vector<int64_t>& target, double tol, const std::string& what) {
    check_backend_against_ref("opencl", "sum_to", {random_f32(shape, ++seed)}, {{"shape", target}}, tol, what);
  };
  sum_to({4, 3, 5}, {3, 5}, 1e-6, "sum_to [3, 5]");
  sum_to({2048, 384}, {384}, 1e-6, "sum_to bias gradient (8 slices)");
  sum_to({3, 5000}, {}, 1e-6, "sum_to scalar (59 slices)");
  sum_to({3, 4500}, {4500}, 1e-6, "sum_to wide");
  sum_to({1100000, 2}, {2}, 1e-6, "sum_to of more rows than 4096 slices of 256");
  sum_to({1, 9}, {1, 9}, 0.0, "sum_to identity");
  sum_to({0, 5}, {5}, 0.0, "sum_to of no rows");
}

TEST(OpenCLReductions, SumSquaresMatchesRef) {
  check_backend_against_ref("opencl", "sum_squares", {random_f32({100003}, 50)}, {}, 1e-6, "sum_squares");
  check_backend_against_ref("opencl", "sum_squares", {random_f32({3}, 51)}, {}, 1e-6, "sum_squares small");
}

// opencl's words for x are ref's and cpu's, the same run after run.
void expect_exact_words(const Tensor& x, const std::string& what) {
  const Tensor opencl = run_on("opencl", "square_sum_exact", {x})[0];
  expect_identical(opencl, run_on("ref", "square_sum_exact", {x})[0], what + ": opencl vs ref");
  expect_identical(opencl, run_on("cpu", "square_sum_exact", {x})[0], what + ": opencl vs cpu");
  expect_identical(opencl, run_on("opencl", "square_sum_exact", {x})[0], what + ": run to run");
}

TEST(OpenCLSquareSumExact, GivesRefsAndCpusWords) {
  expect_exact_words(random_f32({5, 70001}, 52, 3.0f), "random values");
  // Lengths off every multiple of a work-group, one group's 4096 values and the 1024 groups' range.
  for (int64_t count : {int64_t{1}, int64_t{7}, int64_t{4097}, int64_t{32768 + 3}, int64_t{200003},
                        int64_t{4200001}}) {
    expect_exact_words(wide_ranging(count, 53 + static_cast<uint64_t>(count)), std::to_string(count) + " values");
  }
  expect_exact_words(Tensor::zeros({0}, DType::F32), "no values");
}

// bf16 values (the weight gradients of bf16 training, kept narrow), whole and read at an offset.
TEST(OpenCLSquareSumExact, GivesRefsAndCpusWordsForBf16) {
  expect_exact_words(random_f32({5, 70001}, 57, 3.0f).to(DType::BF16), "random bf16 values");
  for (int64_t count : {int64_t{7}, int64_t{4097}, int64_t{200003}}) {
    expect_exact_words(wide_ranging(count, 58 + static_cast<uint64_t>(count)).to(DType::BF16),
                       std::to_string(count) + " bf16 values");
  }
  const Tensor x = wide_ranging(100000, 59).to(DType::BF16);
  const Tensor on_device = x.to_device(get_backend("opencl").device());
  const Tensor words = dispatcher("opencl").call("square_sum_exact", {on_device.narrow(0, 40003, 59996)})[0];
  expect_identical(words.to_host(), run_on("ref", "square_sum_exact", {x.narrow(0, 40003, 59996).clone()})[0],
                   "59996 bf16 values from element 40003");
}

TEST(OpenCLSquareSumExact, CountsInfinitiesAndNansAndKeepsTheFiniteValuesExact) {
  Tensor x = wide_ranging(3 * 4096, 54);
  x.data<float>()[5] = std::numeric_limits<float>::infinity();
  x.data<float>()[4096 + 9] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[4096 + 10] = -std::numeric_limits<float>::infinity();
  expect_exact_words(x, "values with infinities and a NaN");
  const Tensor words = run_on("opencl", "square_sum_exact", {x})[0];
  EXPECT_EQ(words.data<int64_t>()[ExactSquareSum::kWords - 2], 2);
  EXPECT_EQ(words.data<int64_t>()[ExactSquareSum::kWords - 1], 1);
}

TEST(OpenCLSquareSumExact, HandlesOnlyTinyOrOnlyHugeValues) {
  for (float magnitude : {std::numeric_limits<float>::denorm_min() * 3.0f, std::numeric_limits<float>::min(), 1e-30f,
                          1e30f, std::numeric_limits<float>::max()}) {
    Tensor x = random_f32({5000}, 55);
    for (int64_t i = 0; i < x.numel(); ++i) {
      float& value = x.data<float>()[i];
      value = std::fabs(value) < 3.0f ? value * magnitude / 3.0f : magnitude;
    }
    expect_exact_words(x, "values near " + std::to_string(magnitude));
  }
  // Sums far into bin 254's two words: every value the largest float.
  Tensor largest = Tensor::empty({100000}, DType::F32);
  std::fill_n(largest.data<float>(), largest.numel(), std::numeric_limits<float>::max());
  expect_exact_words(largest, "100000 times the largest float");
}

TEST(OpenCLSquareSumExact, PiecesReadAtTheirOffsetsMergeToTheWhole) {
  const Tensor x = wide_ranging(100000, 56);
  const Tensor on_device = x.to_device(get_backend("opencl").device());
  ExactSquareSum pieces;
  for (auto [begin, length] : {std::pair<int64_t, int64_t>{0, 3}, {3, 40000}, {40003, 59996}, {99999, 1}}) {
    const Tensor words = dispatcher("opencl").call("square_sum_exact", {on_device.narrow(0, begin, length)})[0];
    pieces.merge(ExactSquareSum::from_words(words.to_host().data<int64_t>()));
  }
  const Tensor whole = run_on("ref", "square_sum_exact", {x})[0];
  EXPECT_EQ(pieces.words(), ExactSquareSum::from_words(whole.data<int64_t>()).words());
}

}  // namespace
}  // namespace strata::testing
