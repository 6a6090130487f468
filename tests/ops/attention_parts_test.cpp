// The parts of the unfused attention decomposition on `ref` in f64: layout
// ops and bmm against their index formulas, causal_softmax against its
// definition, causal_softmax_backward against finite differences, and shape
// errors that name the op and the input.
#include <cmath>

#include <gtest/gtest.h>

#include "op_test_util.h"

namespace strata::testing {
namespace {

TEST(AttentionParts, SplitHeadsFollowsTheIndexFormula) {
  const int64_t batch = 2, seq = 5, heads = 3, head_dim = 4;
  Tensor x = random_tensor({batch, seq, heads * head_dim}, 1);
  Tensor out = run_ref("split_heads", {x}, {{"n_head", heads}})[0];
  ASSERT_EQ(out.shape(), (Shape{batch, heads, seq, head_dim}));
  std::vector<double> xv = values_of(x), ov = values_of(out);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < seq; ++t) {
        for (int64_t d = 0; d < head_dim; ++d) {
          EXPECT_EQ(ov[static_cast<size_t>(((b * heads + h) * seq + t) * head_dim + d)],
                    xv[static_cast<size_t>((b * seq + t) * heads * head_dim + h * head_dim + d)]);
        }
      }
    }
  }
  Tensor back = run_ref("merge_heads", {out})[0];
  ASSERT_EQ(back.shape(), x.shape());
  EXPECT_EQ(values_of(back), xv);
}

TEST(AttentionParts, BmmFollowsTheProductFormula) {
  const int64_t batch = 3, m = 4, k = 5, p = 2;
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      Tensor a = random_tensor(trans_a ? Shape{batch, k, m} : Shape{batch, m, k}, 2);
      Tensor b = random_tensor(trans_b ? Shape{batch, p, k} : Shape{batch, k, p}, 3);
      Tensor out = run_ref("bmm", {a, b}, {{"trans_a", trans_a}, {"trans_b", trans_b}})[0];
      ASSERT_EQ(out.shape(), (Shape{batch, m, p}));
      std::vector<double> av = values_of(a), bv = values_of(b), expected;
      for (int64_t n = 0; n < batch; ++n) {
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < p; ++j) {
            double sum = 0.0;
            for (int64_t e = 0; e < k; ++e) {
              double a_ie = av[static_cast<size_t>(n * m * k + (trans_a ? e * m + i : i * k + e))];
              double b_ej = bv[static_cast<size_t>(n * k * p + (trans_b ? j * k + e : e * p + j))];
              sum += a_ie * b_ej;
            }
            expected.push_back(sum);
          }
        }
      }
      expect_all_near(out, expected, 1e-14, 1e-14,
                      std::string("bmm trans_a=") + (trans_a ? "1" : "0") + " trans_b=" + (trans_b ? "1" : "0"));
    }
  }
}

TEST(AttentionParts, CausalSoftmaxFollowsItsDefinition) {
  const int64_t rows = 2, seq = 6;
  const double scale = 0.7;
  Tensor s = random_tensor({rows, seq, seq}, 4, 3.0);
  Tensors out = run_ref("causal_softmax", {s}, {{"scale", scale}});
  ASSERT_EQ(out[1].shape(), (Shape{rows, seq}));
  EXPECT_EQ(out[1].dtype(), DType::F64);
  std::vector<double> sv = values_of(s), expected_p, expected_lse;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < seq; ++i) {
      const double* row = sv.data() + (r * seq + i) * seq;
      double total = 0.0;
      for (int64_t j = 0; j <= i; ++j) total += std::exp(scale * row[j]);
      expected_lse.push_back(std::log(total));
      for (int64_t j = 0; j < seq; ++j) expected_p.push_back(j <= i ? std::exp(scale * row[j]) / total : 0.0);
    }
  }
  expect_all_near(out[0], expected_p, 1e-15, 1e-13, "causal_softmax p");
  expect_all_near(out[1], expected_lse, 1e-15, 1e-13, "causal_softmax lse");
}

// L(s) = sum(dp * causal_softmax(s)): <ds, d> must match the central
// difference of L along random directions d.
TEST(AttentionParts, CausalSoftmaxBackwardMatchesFiniteDifferences) {
  Attrs attrs{{"scale", 0.6}};
  Tensor s = random_tensor({2, 7, 7}, 5, 2.0);
  Tensor dp = random_tensor({2, 7, 7}, 6);
  Tensor p = run_ref("causal_softmax", {s}, attrs)[0];
  Tensor ds = run_ref("causal_softmax_backward", {dp, p}, attrs)[0];
  auto loss = [&](const Tensor& point) { return dot(dp, run_ref("causal_softmax", {point}, attrs)[0]); };
  for (uint64_t seed : {11, 12, 13}) {
    Tensor direction = random_tensor(s.shape(), seed);
    double numeric = central_difference(loss, s, direction);
    EXPECT_NEAR(dot(ds, direction), numeric, 1e-7 * (1 + std::abs(numeric))) << "direction seed " << seed;
  }
  // Above the diagonal nothing flows back.
  std::vector<double> dsv = values_of(ds);
  for (size_t e = 0; e < dsv.size(); ++e) {
    if (static_cast<int64_t>(e % 7) > static_cast<int64_t>(e / 7 % 7)) {
      EXPECT_EQ(dsv[e], 0.0) << e;
    }
  }
}

TEST(AttentionParts, ShapeErrorsNameTheInput) {
  Attrs plain{{"trans_a", false}, {"trans_b", false}};
  expect_error([&] { run_ref("bmm", {f64({2, 3, 4}), f64({2, 5, 6})}, plain); }, {"'bmm'", "[2, 3, 4]", "[2, 5, 6]"});
  expect_error([&] { run_ref("bmm", {f64({2, 3, 4}), f64({3, 4, 6})}, plain); }, {"'bmm'", "'a'", "'b'", "leading"});
  expect_error([&] { run_ref("bmm", {f64({4}), f64({4, 6})}, plain); }, {"'bmm'", "'a'"});
  expect_error([] { run_ref("split_heads", {f64({2, 3, 10})}, {{"n_head", 3}}); }, {"'split_heads'", "'x'", "10"});
  expect_error([] { run_ref("split_heads", {f64({2, 10})}, {{"n_head", 2}}); }, {"'split_heads'", "'x'"});
  expect_error([] { run_ref("merge_heads", {f64({2, 3, 10})}); }, {"'merge_heads'", "'x'"});
  expect_error([] { run_ref("causal_softmax", {f64({2, 3, 4})}, {{"scale", 1.0}}); }, {"'causal_softmax'", "'s'"});
  expect_error([] { run_ref("causal_softmax_backward", {f64({3, 3}), f64({4, 4})}, {{"scale", 1.0}}); },
               {"'causal_softmax_backward'", "'p'"});
}

}  // namespace
}  // namespace strata::testing
