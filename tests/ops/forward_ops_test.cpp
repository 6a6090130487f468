// Each forward op of `ref` on small cases whose answers are worked out by hand
// or written as the textbook formula.
#include <cmath>

#include <gtest/gtest.h>

#include "op_test_util.h"

namespace strata::testing {
namespace {

constexpr double kExact = 1e-14;  // f64 results of a few operations

TEST(RefForward, EmbeddingGathersRowsForI32AndI64Ids) {
  Tensor weight = make_tensor({3, 2}, {1, 2, 3, 4, 5, 6});
  for (DType index_type : {DType::I32, DType::I64}) {
    Tensor out = run_ref("embedding", {weight, make_indices({2, 2}, {2, 0, 1, 2}, index_type)})[0];
    EXPECT_EQ(out.shape(), (Shape{2, 2, 2}));
    expect_all_near(out, {5, 6, 1, 2, 3, 4, 5, 6}, 0, 0, "embedding");
  }
}

TEST(RefForward, EmbeddingBackwardSumsRepeatedIdsAndZerosUnusedRows) {
  Tensor dout = make_tensor({3, 2}, {1, 2, 3, 4, 5, 6});
  Tensor dweight = run_ref("embedding_backward", {dout, make_indices({3}, {1, 3, 1}, DType::I32)},
                           {{"num_embeddings", int64_t{4}}})[0];
  EXPECT_EQ(dweight.shape(), (Shape{4, 2}));
  expect_all_near(dweight, {0, 0, 6, 8, 0, 0, 3, 4}, 0, 0, "embedding_backward");
}

TEST(RefForward, AddBroadcastsTheSuffixOperand) {
  Tensor a = make_tensor({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = make_tensor({3}, {10, 20, 30});
  expect_all_near(run_ref("add", {a, b})[0], {11, 22, 33, 14, 25, 36}, 0, 0, "add");
}

TEST(RefForward, AddMayWriteIntoItsFirstInput) {
  Tensor a = make_tensor({2, 2}, {1, 2, 3, 4}, DType::F32);
  ref_dispatcher().run("add", {a, make_tensor({2}, {0.5, -1}, DType::F32)}, {a});
  expect_all_near(a, {1.5, 1, 3.5, 3}, 0, 0, "add in place");
}

TEST(RefForward, SumToReducesTheMissingLeadingDims) {
  std::vector<double> counting(12);
  for (size_t i = 0; i < counting.size(); ++i) counting[i] = static_cast<double>(i + 1);
  Tensor x = make_tensor({2, 2, 3}, counting);
  expect_all_near(run_ref("sum_to", {x}, {{"shape", std::vector<int64_t>{3}}})[0], {22, 26, 30}, 0, 0, "to [3]");
  expect_all_near(run_ref("sum_to", {x}, {{"shape", std::vector<int64_t>{2, 3}}})[0], {8, 10, 12, 14, 16, 18}, 0, 0,
                  "to [2, 3]");
  expect_all_near(run_ref("sum_to", {x}, {{"shape", std::vector<int64_t>{2, 2, 3}}})[0], counting, 0, 0, "to itself");
  Tensor total = run_ref("sum_to", {x}, {{"shape", std::vector<int64_t>{}}})[0];
  EXPECT_EQ(total.shape(), Shape{});
  EXPECT_EQ(total.item(), 78);
}

TEST(RefForward, ScaleMultipliesAndMayWorkInPlace) {
  Tensor x = make_tensor({3}, {1, -2, 3});
  expect_all_near(run_ref("scale", {x}, {{"factor", 2.5}})[0], {2.5, -5, 7.5}, 0, 0, "scale");
  ref_dispatcher().run("scale", {x}, {x}, {{"factor", -2.0}});
  expect_all_near(x, {-2, 4, -6}, 0, 0, "scale in place");
}

TEST(RefForward, SumSquaresIsF32ForNarrowTypesAndF64ForF64) {
  Tensor f64 = run_ref("sum_squares", {make_tensor({3}, {1, 2, 3})})[0];
  EXPECT_EQ(f64.dtype(), DType::F64);
  EXPECT_EQ(f64.item(), 14);
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    Tensor out = run_ref("sum_squares", {make_tensor({2, 2}, {1, -2, 3, 0.5}, dtype)})[0];
    EXPECT_EQ(out.dtype(), DType::F32);
    EXPECT_EQ(out.shape(), Shape{});
    EXPECT_EQ(out.item(), 14.25);
  }
}

// torch.nn.functional.gelu(x, approximate="tanh") in float64, and its derivative.
const std::vector<double> kGeluPoints = {-3, -1, -0.5, 0, 0.5, 1, 3};
const std::vector<double> kTorchGelu = {-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0,
                                        0.34571400982514394,   0.84119199060827676,  2.9963626079182268};
const std::vector<double> kTorchGeluSlope = {-0.011584166630969648, -0.082964083845782521, 0.13263009646535764, 0.5,
                                             0.86736990353464238,   1.0829640838457826,    1.0115841666309695};

TEST(RefForward, GeluMatchesTorchTanhApproximation) {
  Tensor x = make_tensor({7}, kGeluPoints);
  expect_all_near(run_ref("gelu", {x})[0], kTorchGelu, kExact, kExact, "gelu");
}

TEST(RefForward, GeluBackwardMatchesTorchDerivative) {
  Tensor x = make_tensor({7}, kGeluPoints);
  Tensor dy = make_tensor({7}, {2, 2, 2, 2, 2, 2, 2});
  std::vector<double> expected;
  for (double slope : kTorchGeluSlope) expected.push_back(2 * slope);
  expect_all_near(run_ref("gelu_backward", {dy, x})[0], expected, kExact, kExact, "gelu_backward");
}

TEST(RefForward, LayernormNormalisesEachRowWithBiasedVariance) {
  const double eps = 1e-5;
  Tensor x = make_tensor({2, 4}, {1, 2, 3, 4, -1, 0, 0, 1});
  Tensor gamma = make_tensor({4}, {1, 2, 1, 0.5});
  Tensor beta = make_tensor({4}, {0, 0, 1, -1});
  Tensors out = run_ref("layernorm", {x, gamma, beta}, {{"eps", eps}});
  // Row 0: mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4; row 1: mean 0, variance 2 / 4.
  double rstd0 = 1 / std::sqrt(1.25 + eps), rstd1 = 1 / std::sqrt(0.5 + eps);
  expect_all_near(out[1], {2.5, 0}, kExact, kExact, "mean");
  expect_all_near(out[2], {rstd0, rstd1}, kExact, kExact, "rstd");
  expect_all_near(out[0],
                  {-1.5 * rstd0, -0.5 * rstd0 * 2, 0.5 * rstd0 + 1, 1.5 * rstd0 * 0.5 - 1,  //
                   -1 * rstd1, 0, 1, 1 * rstd1 * 0.5 - 1},
                  kExact, kExact, "y");
  Tensors narrow = run_ref("layernorm", {x.to(DType::BF16), gamma.to(DType::BF16), beta.to(DType::BF16)}, {{"eps", eps}});
  EXPECT_EQ(narrow[1].dtype(), DType::F32);
  EXPECT_EQ(narrow[2].dtype(), DType::F32);
}

TEST(RefForward, MatmulPlainTransposedAndRankOne) {
  Tensor a = make_tensor({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = make_tensor({3, 2}, {7, 8, 9, 10, 11, 12});
  Tensor b_transposed = make_tensor({2, 3}, {7, 9, 11, 8, 10, 12});
  Attrs plain{{"trans_a", false}, {"trans_b", false}};
  Attrs trans_b{{"trans_a", false}, {"trans_b", true}};
  expect_all_near(run_ref("matmul", {a, b}, plain)[0], {58, 64, 139, 154}, 0, 0, "a b");
  expect_all_near(run_ref("matmul", {a, b_transposed}, trans_b)[0], {58, 64, 139, 154}, 0, 0, "a b^T");
  Tensor row = run_ref("matmul", {make_tensor({3}, {1, 2, 3}), b}, plain)[0];
  EXPECT_EQ(row.shape(), Shape{2});
  expect_all_near(row, {58, 64}, 0, 0, "vector times matrix");
}

TEST(RefForward, MatmulMergesLeadingDims) {
  Tensor a = make_tensor({2, 1, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = make_tensor({3, 2}, {7, 8, 9, 10, 11, 12});
  Tensor out = run_ref("matmul", {a, b}, {{"trans_a", false}, {"trans_b", false}})[0];
  EXPECT_EQ(out.shape(), (Shape{2, 1, 2}));
  expect_all_near(out, {58, 64, 139, 154}, 0, 0, "[2, 1, 3] x [3, 2]");
}

TEST(RefForward, MatmulTransASumsOuterProductsOverRows) {
  // a rows (1, 2, 3) and (4, 5, 6); b rows (1, 2) and (3, 4): out = sum_r a_r^T b_r.
  Tensor a = make_tensor({2, 1, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = make_tensor({2, 1, 2}, {1, 2, 3, 4});
  Tensor out = run_ref("matmul", {a, b}, {{"trans_a", true}, {"trans_b", false}})[0];
  EXPECT_EQ(out.shape(), (Shape{3, 2}));
  expect_all_near(out, {1 + 12, 2 + 16, 2 + 15, 4 + 20, 3 + 18, 6 + 24}, 0, 0, "a^T b");
}

TEST(RefForward, LinearIsMatmulPlusBias) {
  Tensor x = make_tensor({1, 2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor w = make_tensor({3, 2}, {7, 8, 9, 10, 11, 12});
  Tensor bias = make_tensor({2}, {0.5, -1});
  Tensor y = run_ref("linear", {x, w, bias})[0];
  EXPECT_EQ(y.shape(), (Shape{1, 2, 2}));
  expect_all_near(y, {58.5, 63, 139.5, 153}, 0, 0, "linear");
}

TEST(RefForward, AttentionTwoTokensTwoHeadsByHand) {
  // Rows are q | k | v with C = 2 and one column per head (scale 1/sqrt(1)).
  Tensor qkv = make_tensor({1, 2, 6}, {1, 2, 0.5, -1, 3, 4,  //
                                       -1, 0.5, 2, 1, 5, -6});
  Tensors out = run_ref("attention", {qkv}, {{"n_head", int64_t{2}}});
  // head 0, token 1: scores -1 * 0.5 and -1 * 2; head 1, token 1: 0.5 * -1 and 0.5 * 1.
  double w00 = std::exp(-0.5), w01 = std::exp(-2.0), w10 = std::exp(-0.5), w11 = std::exp(0.5);
  expect_all_near(out[0], {3, 4, (3 * w00 + 5 * w01) / (w00 + w01), (4 * w10 - 6 * w11) / (w10 + w11)}, kExact, kExact,
                  "out");
  // lse is [B, H, T]: head 0 then head 1; token 0 sees only itself.
  expect_all_near(out[1], {0.5, std::log(w00 + w01), -2, std::log(w10 + w11)}, kExact, kExact, "lse");
}

// Causal attention written directly from its definition, for random cases.
std::vector<double> naive_attention(const std::vector<double>& qkv, int64_t batch, int64_t seq, int64_t width,
                                    int64_t heads) {
  int64_t dim = width / heads;
  std::vector<double> out(static_cast<size_t>(batch * seq * width));
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t e) {
    return qkv[static_cast<size_t>((b * seq + t) * 3 * width + part * width + h * dim + e)];
  };
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < seq; ++i) {
        std::vector<double> weights;
        double total = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double score = 0;
          for (int64_t e = 0; e < dim; ++e) score += at(b, i, 0, h, e) * at(b, j, 1, h, e);
          weights.push_back(std::exp(score / std::sqrt(static_cast<double>(dim))));
          total += weights.back();
        }
        for (int64_t e = 0; e < dim; ++e) {
          double sum = 0;
          for (int64_t j = 0; j <= i; ++j) sum += weights[static_cast<size_t>(j)] * at(b, j, 2, h, e);
          out[static_cast<size_t>((b * seq + i) * width + h * dim + e)] = sum / total;
        }
      }
    }
  }
  return out;
}

TEST(RefForward, AttentionMatchesDefinitionOnRandomBatch) {
  Tensor qkv = random_tensor({2, 5, 18}, 11);
  Tensor out = run_ref("attention", {qkv}, {{"n_head", int64_t{3}}})[0];
  expect_all_near(out, naive_attention(values_of(qkv), 2, 5, 6, 3), 1e-13, 1e-13, "attention");
}

TEST(RefForward, CrossEntropyAveragesLseMinusTargetLogit) {
  Tensor logits = make_tensor({2, 3}, {0, 0, 0, 1, 2, 3});
  double lse1 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  for (DType index_type : {DType::I32, DType::I64}) {
    Tensors out = run_ref("cross_entropy", {logits, make_indices({2}, {1, 0}, index_type)});
    EXPECT_NEAR(out[0].item(), (std::log(3.0) + lse1 - 1) / 2, kExact);
    expect_all_near(out[1], {std::log(3.0), lse1}, kExact, kExact, "lse");
  }
}

TEST(RefForward, CrossEntropyBackwardIsScaledSoftmaxMinusOnehot) {
  Tensor logits = make_tensor({2, 3}, {0, 0, 0, 1, 2, 3});
  Tensor targets = make_indices({2}, {1, 0});
  Tensor lse = run_ref("cross_entropy", {logits, targets})[1];
  Tensor dlogits = run_ref("cross_entropy_backward", {make_tensor({}, {3}), logits, targets, lse})[0];
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  double third = 1.0 / 3;
  // dloss 3 over 2 positions.
  expect_all_near(dlogits,
                  {1.5 * third, 1.5 * (third - 1), 1.5 * third,  //
                   1.5 * (std::exp(1.0) / z - 1), 1.5 * std::exp(2.0) / z, 1.5 * std::exp(3.0) / z},
                  kExact, kExact, "dlogits");
}

TEST(RefForward, LogSumExpsStayFiniteForHugeScoresAndLogits) {
  Tensors loss = run_ref("cross_entropy", {make_tensor({1, 3}, {1000, 0, -1000}), make_indices({1}, {1})});
  EXPECT_NEAR(loss[0].item(), 1000, kExact);
  EXPECT_NEAR(loss[1].item(), 1000, kExact);
  // One head of width 1: token 1 scores 1000 * 1 against key 0 and 1000 * -1 against key 1.
  Tensor qkv = make_tensor({1, 2, 3}, {1, 1, 2, 1000, -1, 7});
  Tensors attention = run_ref("attention", {qkv}, {{"n_head", int64_t{1}}});
  expect_all_near(attention[0], {2, 2}, kExact, kExact, "out");
  expect_all_near(attention[1], {1, 1000}, kExact, kExact, "lse");
}

}  // namespace
}  // namespace strata::testing
