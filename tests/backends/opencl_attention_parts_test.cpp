// split_heads, merge_heads and causal_softmax(_backward) on the opencl backend against ref, on the
// shapes and tolerances of the cpu kernels' tests (attention_parts_test.cpp): layout copies are
// exact; the softmax rows round like any f32 row of exps (2e-6 forward, 5e-6 backward after the
// cancellation in dp - rowsum(dp p), on scaled scores up to ~8). bmm is opencl_matmul_test.cpp's.
#include <gtest/gtest.h>

#include "cpu_test_util.h"

namespace strata::testing {
namespace {

TEST(OpenCLAttentionParts, HeadLayoutsAreExact) {
  Tensor x = random_f32({2, 37, 3 * 80}, 1);
  Tensor heads = check_backend_against_ref("opencl", "split_heads", {x}, {{"n_head", 3}}, 0.0, "split_heads")[0];
  EXPECT_EQ(heads.shape(), (Shape{2, 3, 37, 80}));
  check_backend_against_ref("opencl", "merge_heads", {heads}, {}, 0.0, "merge_heads");
}

TEST(OpenCLAttentionParts, CausalSoftmaxMatchesRef) {
  for (int64_t seq : {1, 16, 37, 130}) {
    Tensor scores = random_f32({2, 3, seq, seq}, 30 + seq, 4.0f);
    Attrs attrs{{"scale", 0.5}};
    std::string what = "causal_softmax T=" + std::to_string(seq);
    Tensors forward = check_backend_against_ref("opencl", "causal_softmax", {scores}, attrs, 2e-6, what);
    Tensor dp = random_f32({2, 3, seq, seq}, 40 + seq);
    check_backend_against_ref("opencl", "causal_softmax_backward", {dp, forward[0]}, attrs, 5e-6, what + " backward");
  }
}

}  // namespace
}  // namespace strata::testing
