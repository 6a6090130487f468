// The cpu f32 kernels of the attention decomposition's parts vs ref, on odd
// shapes, with determinism checks. Layout copies must be exact; bmm rounds
// like any f32 GEMM (measured worst 4.4e-7 relative to |expected| + rms, 2e-6
// allowed); the softmax rows use an exp with 2e-7 relative error (measured
// worst 2.2e-7 forward and, after the cancellation in dp - rowsum(dp p),
// 1.1e-6 backward, on scaled scores up to ~8; 2e-6 and 5e-6 allowed).
#include <gtest/gtest.h>

#include "cpu_test_util.h"

namespace strata::testing {
namespace {

TEST(CpuAttentionParts, HeadLayoutsAreExact) {
  Tensor x = random_f32({2, 37, 3 * 80}, 1);
  Tensor heads = check_against_ref("split_heads", {x}, {{"n_head", 3}}, 0.0, "split_heads")[0];
  EXPECT_EQ(heads.shape(), (Shape{2, 3, 37, 80}));
  check_against_ref("merge_heads", {heads}, {}, 0.0, "merge_heads");
}

TEST(CpuAttentionParts, BmmMatchesRef) {
  struct Case {
    Shape a, b;
    bool trans_a, trans_b;
  };
  const Case cases[] = {
      {{3, 37, 64}, {3, 64, 45}, false, false}, {{3, 37, 64}, {3, 45, 64}, false, true},
      {{3, 64, 37}, {3, 64, 45}, true, false},  {{3, 64, 37}, {3, 45, 64}, true, true},
      {{2, 2, 19, 80}, {2, 2, 19, 80}, false, true}, {{17, 5}, {5, 3}, false, false},
      {{2, 19, 19}, {2, 19, 80}, true, false},
  };
  uint64_t seed = 10;
  for (const Case& c : cases) {
    Tensor a = random_f32(c.a, ++seed);
    Tensor b = random_f32(c.b, ++seed);
    std::string what = "bmm " + shape_str(c.a) + (c.trans_a ? "^T" : "") + " x " + shape_str(c.b) +
                       (c.trans_b ? "^T" : "");
    check_against_ref("bmm", {a, b}, {{"trans_a", c.trans_a}, {"trans_b", c.trans_b}}, 2e-6, what);
  }
}

TEST(CpuAttentionParts, CausalSoftmaxMatchesRef) {
  for (int64_t seq : {1, 16, 37, 130}) {
    Tensor scores = random_f32({2, 3, seq, seq}, 30 + seq, 4.0f);
    Attrs attrs{{"scale", 0.5}};
    std::string what = "causal_softmax T=" + std::to_string(seq);
    Tensors forward = check_against_ref("causal_softmax", {scores}, attrs, 2e-6, what);
    Tensor dp = random_f32({2, 3, seq, seq}, 40 + seq);
    check_against_ref("causal_softmax_backward", {dp, forward[0]}, attrs, 5e-6, what + " backward");
  }
}

}  // namespace
}  // namespace strata::testing
