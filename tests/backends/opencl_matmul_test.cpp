// matmul, linear and bmm on the opencl backend (CLBlast) against ref. CLBlast sums each output
// in f32 in its own order, so f32 products of length K differ from ref's exact sums by a few ulps
// times sqrt(K): 1e-5 of the output's scale covers K up to a few thousand.
#include <gtest/gtest.h>

#include "cpu_test_util.h"

namespace strata::testing {
namespace {

constexpr double kGemmTol = 1e-5;

TEST(OpenCLMatmul, EveryTransposeAndOddShapeMatchesRef) {
  const Tensor a = random_f32({3, 37, 65}, 1);
  check_backend_against_ref("opencl", "matmul", {a, random_f32({65, 29}, 2)},
                            {{"trans_a", false}, {"trans_b", false}}, kGemmTol, "a b");
  check_backend_against_ref("opencl", "matmul", {a, random_f32({29, 65}, 3)},
                            {{"trans_a", false}, {"trans_b", true}}, kGemmTol, "a b^T");
  check_backend_against_ref("opencl", "matmul", {a, random_f32({3, 37, 17}, 4)},
                            {{"trans_a", true}, {"trans_b", false}}, kGemmTol, "a^T b over rows");
}

TEST(OpenCLMatmul, LinearAddsTheBiasToEveryRow) {
  check_backend_against_ref("opencl", "linear", {random_f32({2, 33, 70}, 5), random_f32({70, 45}, 6), random_f32({45}, 7)},
                            {}, kGemmTol, "linear");
}

TEST(OpenCLMatmul, BatchedGemmMatchesRefForEveryTranspose) {
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      const Tensor a = random_f32(trans_a ? Shape{2, 3, 19, 23} : Shape{2, 3, 23, 19}, 8);
      const Tensor b = random_f32(trans_b ? Shape{2, 3, 31, 19} : Shape{2, 3, 19, 31}, 9);
      check_backend_against_ref("opencl", "bmm", {a, b}, {{"trans_a", trans_a}, {"trans_b", trans_b}}, kGemmTol,
                                fmt::format("bmm trans_a={} trans_b={}", trans_a, trans_b));
    }
  }
}

// ops.sum_order = "permuted" splits CLBlast's sums as the cpu backend splits sgemm's: the same sums, other bits.
TEST(OpenCLMatmul, PermutedSumOrderMatchesRefAndMovesTheBits) {
  const Tensor a = random_f32({3, 37, 481}, 10);
  check_permuted_sums_against_ref("opencl", "matmul", {a, random_f32({481, 29}, 11)},
                                  {{"trans_a", false}, {"trans_b", false}}, kGemmTol, "a b");
  check_permuted_sums_against_ref("opencl", "matmul", {a, random_f32({29, 481}, 12)},
                                  {{"trans_a", false}, {"trans_b", true}}, kGemmTol, "a b^T");
  check_permuted_sums_against_ref("opencl", "matmul", {random_f32({4, 200, 17}, 13), random_f32({4, 200, 23}, 14)},
                                  {{"trans_a", true}, {"trans_b", false}}, kGemmTol, "a^T b over rows");
  check_permuted_sums_against_ref("opencl", "linear", {a, random_f32({481, 45}, 15), random_f32({45}, 16)}, {},
                                  kGemmTol, "linear");
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      const Tensor left = random_f32(trans_a ? Shape{2, 3, 301, 23} : Shape{2, 3, 23, 301}, 17);
      const Tensor right = random_f32(trans_b ? Shape{2, 3, 31, 301} : Shape{2, 3, 301, 31}, 18);
      check_permuted_sums_against_ref("opencl", "bmm", {left, right}, {{"trans_a", trans_a}, {"trans_b", trans_b}},
                                      kGemmTol, fmt::format("bmm trans_a={} trans_b={}", trans_a, trans_b));
    }
  }
}

}  // namespace
}  // namespace strata::testing
