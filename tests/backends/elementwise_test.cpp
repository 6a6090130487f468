// add, scale, gelu, gelu_backward, sum_to and sum_squares: cpu vs ref.
// Tolerances: add is exact in f32; scale, the reductions (f64 sums) and gelu
// and its backward (through a polynomial e^x, relative error ~2e-7; measured
// 2e-7) stay within a few f32 ulps: 1e-6, 2e-6 for gelu's backward.
#include <gtest/gtest.h>

#include "cpu_test_util.h"

namespace strata::testing {
namespace {

TEST(CpuElementwise, AddMatchesRefForSameShapeAndSuffixBroadcast) {
  Tensor a = random_f32({3, 5, 77}, 1);
  check_against_ref("add", {a, random_f32({3, 5, 77}, 2)}, {}, 0.0, "add same shape");
  check_against_ref("add", {a, random_f32({77}, 3)}, {}, 0.0, "add [77]");
  check_against_ref("add", {a, random_f32({5, 77}, 4)}, {}, 0.0, "add [5, 77]");
  check_against_ref("add", {a, random_f32({}, 5)}, {}, 0.0, "add scalar");
  Tensor big = random_f32({40000}, 6);  // several parallel chunks
  check_against_ref("add", {big.reshape({4, 10000}), random_f32({10000}, 7)}, {}, 0.0, "add chunked");
}

TEST(CpuElementwise, AddAndScaleMayWriteOverTheirInput) {
  expect_add_and_scale_in_place(random_f32({2, 3000, 7}, 8), random_f32({7}, 9), -0.37, "f32");
}

TEST(CpuElementwise, ScaleMatchesRef) {
  check_against_ref("scale", {random_f32({1, 33333}, 10)}, {{"factor", 0.125}}, 1e-6, "scale");
  check_against_ref("scale", {random_f32({7}, 11)}, {{"factor", -3.3}}, 1e-6, "scale small");
}

TEST(CpuElementwise, GeluAndItsBackwardMatchRef) {
  // Scale 4 reaches both tails, where tanh saturates.
  for (float scale : {1.0f, 4.0f}) {
    Tensor x = random_f32({3, 11111}, 12, scale);
    check_against_ref("gelu", {x}, {}, 1e-6, "gelu");
    check_against_ref("gelu_backward", {random_f32({3, 11111}, 13), x}, {}, 2e-6, "gelu_backward");
  }
  check_against_ref("gelu", {random_f32({1}, 14)}, {}, 1e-6, "gelu single");
}

TEST(CpuElementwise, SumToMatchesRef) {
  check_against_ref("sum_to", {random_f32({4, 3, 5}, 15)}, {{"shape", std::vector<int64_t>{3, 5}}}, 1e-6,
                    "sum_to [3, 5]");
  check_against_ref("sum_to", {random_f32({2048, 384}, 16)}, {{"shape", std::vector<int64_t>{384}}}, 1e-6,
                    "sum_to bias gradient");
  check_against_ref("sum_to", {random_f32({3, 5000}, 17)}, {{"shape", std::vector<int64_t>{}}}, 1e-6,
                    "sum_to scalar");
  check_against_ref("sum_to", {random_f32({3, 4500}, 18)}, {{"shape", std::vector<int64_t>{4500}}}, 1e-6,
                    "sum_to wide");
  check_against_ref("sum_to", {random_f32({1, 9}, 19)}, {{"shape", std::vector<int64_t>{1, 9}}}, 0.0,
                    "sum_to identity");
  check_against_ref("sum_to", {random_f32({0, 5}, 20)}, {{"shape", std::vector<int64_t>{5}}}, 0.0,
                    "sum_to of no rows");
}

TEST(CpuElementwise, SumSquaresMatchesRef) {
  check_against_ref("sum_squares", {random_f32({100003}, 21)}, {}, 1e-6, "sum_squares");
  check_against_ref("sum_squares", {random_f32({3}, 22)}, {}, 1e-6, "sum_squares small");
}

}  // namespace
}  // namespace strata::testing
