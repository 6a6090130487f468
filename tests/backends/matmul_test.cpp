// matmul (plain, trans_b, trans_a) and linear: cpu (oneDNN sgemm) vs ref.
// f32 products summed over K terms carry an error growing like sqrt(K) ulps
// of the output's magnitude: measured 1.5e-6 at K = 1536 and 2000, allowed
// 1e-5.
#include <gtest/gtest.h>

#include "cpu_test_util.h"
#include "ops/sum_order.h"

namespace strata::testing {
namespace {

Attrs gemm_attrs(bool trans_a, bool trans_b) { return {{"trans_a", trans_a}, {"trans_b", trans_b}}; }

TEST(CpuMatmul, PlainMatchesRefOnOddShapes) {
  check_against_ref("matmul", {random_f32({3, 5, 37}, 1), random_f32({37, 29}, 2)}, gemm_attrs(false, false), 1e-5,
                    "[3,5,37] x [37,29]");
  check_against_ref("matmul", {random_f32({1, 384}, 3), random_f32({384, 200}, 4)}, gemm_attrs(false, false), 1e-5,
                    "one row");
  check_against_ref("matmul", {random_f32({130, 1536}, 5), random_f32({1536, 70}, 6)}, gemm_attrs(false, false),
                    1e-5, "K = 1536");
}

TEST(CpuMatmul, TransposedBMatchesRef) {
  check_against_ref("matmul", {random_f32({2, 33, 48}, 7), random_f32({101, 48}, 8)}, gemm_attrs(false, true), 1e-5,
                    "[2,33,48] x [101,48]^T");
  check_against_ref("matmul", {random_f32({1, 7}, 9), random_f32({5, 7}, 10)}, gemm_attrs(false, true), 1e-5,
                    "one row, trans_b");
}

TEST(CpuMatmul, TransposedASumsOverAllRows) {
  check_against_ref("matmul", {random_f32({2, 67, 40}, 11), random_f32({2, 67, 23}, 12)}, gemm_attrs(true, false),
                    1e-5, "weight gradient over [2,67]");
  check_against_ref("matmul", {random_f32({1, 1, 9}, 13), random_f32({1, 1, 4}, 14)}, gemm_attrs(true, false), 1e-5,
                    "weight gradient of one row");
  check_against_ref("matmul", {random_f32({2000, 17}, 15), random_f32({2000, 31}, 16)}, gemm_attrs(true, false),
                    1e-5, "weight gradient over 2000 rows");
}

TEST(CpuMatmul, EmptyInnerDimensionGivesZeros) {
  Tensor out = run_on("cpu", "matmul", {random_f32({3, 0}, 17), random_f32({0, 4}, 18)}, gemm_attrs(false, false))[0];
  expect_close(out, Tensor::zeros({3, 4}, DType::F32), 0.0, "K = 0");
}

TEST(CpuLinear, MatchesRefWithBias) {
  check_against_ref("linear", {random_f32({2, 33, 96}, 19), random_f32({96, 70}, 20), random_f32({70}, 21)}, {},
                    1e-5, "linear [2,33,96] x [96,70]");
  check_against_ref("linear", {random_f32({1, 5}, 22), random_f32({5, 3}, 23), random_f32({3}, 24)}, {}, 1e-5,
                    "linear one row");
}

// ops.sum_order = "permuted": every product sums the later part of k first. The sums are the same, so
// every form still matches ref within the same bound, and their order is not: the bits move.
TEST(CpuMatmul, PermutedSumOrderMatchesRefAndMovesTheBits) {
  check_permuted_sums_against_ref("cpu", "matmul", {random_f32({130, 1537}, 5), random_f32({1537, 70}, 6)},
                                  gemm_attrs(false, false), 1e-5, "plain, K = 1537");
  check_permuted_sums_against_ref("cpu", "matmul", {random_f32({2, 33, 480}, 7), random_f32({101, 480}, 8)},
                                  gemm_attrs(false, true), 1e-5, "trans_b, K = 480");
  check_permuted_sums_against_ref("cpu", "matmul", {random_f32({2000, 17}, 15), random_f32({2000, 31}, 16)},
                                  gemm_attrs(true, false), 1e-5, "trans_a over 2000 rows");
  check_permuted_sums_against_ref("cpu", "linear",
                                  {random_f32({2, 33, 960}, 19), random_f32({960, 70}, 20), random_f32({70}, 21)}, {},
                                  1e-5, "linear with bias");
}

TEST(CpuMatmul, OneTermPermutesToItself) {
  const Tensors inputs = {random_f32({3, 1}, 22), random_f32({1, 4}, 23)};
  const Tensor natural = run_on("cpu", "matmul", inputs, gemm_attrs(false, false))[0];
  set_sum_order(SumOrder::Permuted);
  const Tensor permuted = run_on("cpu", "matmul", inputs, gemm_attrs(false, false))[0];
  set_sum_order(SumOrder::Natural);
  expect_close(permuted, natural, 0.0, "K = 1");
}

}  // namespace
}  // namespace strata::testing
