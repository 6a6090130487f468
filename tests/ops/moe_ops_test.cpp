// The mixture-of-experts ops on `ref` against their formulas written out here: the router's top-k
// (softmax and sigmoid, with and without norm_topk_prob, ties), the dispatch plan (sorted by expert,
// then by assignment; a capacity dropping the later assignments), the permutation and combine, the
// grouped GEMM as one product per expert, the sigmoid gate, and the load-balancing loss as transformers'
// load_balancing_loss_func computes it over several layers' router logits at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "op_test_util.h"

namespace strata::testing {
namespace {

Attrs routing(int64_t top_k, const std::string& scoring, bool norm, double capacity = 0) {
  return {{"top_k", top_k}, {"scoring", scoring}, {"norm_topk_prob", norm}, {"capacity_factor", capacity}};
}

std::vector<int64_t> ints_of(const Tensor& tensor) {
  std::vector<int64_t> values(static_cast<size_t>(tensor.numel()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = tensor.data<int32_t>()[i];
  return values;
}

std::vector<double> softmax(const std::vector<double>& row) {
  double max = *std::max_element(row.begin(), row.end()), sum = 0;
  std::vector<double> p(row.size());
  for (size_t e = 0; e < row.size(); ++e) sum += (p[e] = std::exp(row[e] - max));
  for (double& v : p) v /= sum;
  return p;
}

// torch.topk's choice with ties to the lower index: indices sorted by descending score.
std::vector<int64_t> top_k(const std::vector<double>& scores, size_t k) {
  std::vector<int64_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
  return {order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k)};
}

TEST(MoeOps, RouteTakesTheTopKScoresAsTransformersDoes) {
  const int64_t experts = 6, k = 2;
  Tensor logits = random_tensor({2, 3, experts}, 1, 2.0);
  for (const std::string scoring : {"softmax", "sigmoid"}) {
    for (bool norm : {false, true}) {
      SCOPED_TRACE(scoring + (norm ? " normalised" : ""));
      Tensors out = run_ref("moe_route", {logits}, routing(k, scoring, norm));
      ASSERT_EQ(out[0].shape(), (Shape{2, 3, k}));
      std::vector<double> all = values_of(logits), expected_weights;
      std::vector<int64_t> expected_experts;
      for (size_t t = 0; t < 6; ++t) {
        std::vector<double> row(all.begin() + static_cast<std::ptrdiff_t>(t * experts),
                                all.begin() + static_cast<std::ptrdiff_t>((t + 1) * experts));
        std::vector<double> scores = row;
        if (scoring == "softmax") scores = softmax(row);
        else for (double& s : scores) s = 1 / (1 + std::exp(-s));
        std::vector<int64_t> chosen = top_k(scores, k);
        double sum = scores[chosen[0]] + scores[chosen[1]];
        for (int64_t e : chosen) {
          expected_experts.push_back(e);
          expected_weights.push_back(norm ? scores[e] / sum : scores[e]);
        }
      }
      EXPECT_EQ(ints_of(out[1]), expected_experts);
      expect_all_near(out[0], expected_weights, 0, 1e-14, "weights");
    }
  }
}

TEST(MoeOps, RouteBreaksTiesTowardTheLowerExpert) {
  Tensor logits = make_tensor({1, 4}, {0.5, 2.0, 0.5, 2.0});
  EXPECT_EQ(ints_of(run_ref("moe_route", {logits}, routing(3, "softmax", false))[1]), (std::vector<int64_t>{1, 3, 0}));
}

// Four tokens over three experts, top-2: token 0 picks (2, 0), 1 (0, 1), 2 (2, 1), 3 (0, 2).
Tensor planned_logits() { return make_tensor({4, 3}, {2, 0, 3, 3, 2, 0, 0, 2, 3, 3, 0, 2}); }

TEST(MoeOps, DispatchPlanSortsByExpertThenByAssignment) {
  Tensors out = run_ref("moe_route", {planned_logits()}, routing(2, "softmax", true));
  EXPECT_EQ(ints_of(out[1]), (std::vector<int64_t>{2, 0, 0, 1, 2, 1, 0, 2}));
  // Expert 0 holds assignments 1, 2, 6; expert 1: 3, 5; expert 2: 0, 4, 7.
  EXPECT_EQ(ints_of(out[2]), (std::vector<int64_t>{5, 0, 1, 3, 6, 4, 2, 7}));
  EXPECT_EQ(ints_of(out[3]), (std::vector<int64_t>{3, 2, 3}));
  expect_all_near(out[4], {3, 2, 3}, 0, 0, "routed");
  expect_all_near(out[5], {3, 2, 3}, 0, 0, "kept: dropless");
}

TEST(MoeOps, CapacityDropsEachExpertsLaterAssignments) {
  Tensors out = run_ref("moe_route", {planned_logits()}, routing(2, "softmax", true, 0.7));  // ceil(0.7 * 8 / 3) = 2 rows
  EXPECT_EQ(ints_of(out[2]), (std::vector<int64_t>{4, 0, 1, 2, 5, 3, -1, -1}));
  EXPECT_EQ(ints_of(out[3]), (std::vector<int64_t>{2, 2, 2}));
  expect_all_near(out[4], {3, 2, 3}, 0, 0, "routed counts the dropped too");
  expect_all_near(out[5], {2, 2, 2}, 0, 0, "kept");
}

TEST(MoeOps, PermuteCopiesTokensToTheirRowsAndCombineWeighsThemBack) {
  Tensors route = run_ref("moe_route", {planned_logits()}, routing(2, "softmax", true, 0.7));
  Tensor x = random_tensor({4, 5}, 2);
  Tensor xs = run_ref("moe_permute", {x, route[2]})[0];
  ASSERT_EQ(xs.shape(), (Shape{8, 5}));
  std::vector<double> xv = values_of(x), xsv = values_of(xs), expected(40, 0.0);
  std::vector<int64_t> rows = ints_of(route[2]);
  for (size_t a = 0; a < 8; ++a) {
    if (rows[a] >= 0) std::copy_n(xv.begin() + static_cast<std::ptrdiff_t>(a / 2 * 5), 5, expected.begin() + rows[a] * 5);
  }
  expect_all_near(xs, expected, 0, 0, "permuted rows (the two dropped rows zero)");
  // Expert outputs = 3 * each row: the combine is then 3 * (sum of kept weights) * x.
  std::vector<double> ys_values = xsv;
  for (double& v : ys_values) v *= 3;
  Tensor y = run_ref("moe_combine", {make_tensor({8, 5}, ys_values), route[0], route[2]})[0];
  std::vector<double> w = values_of(route[0]), combined(20, 0.0);
  for (size_t a = 0; a < 8; ++a) {
    for (size_t c = 0; c < 5 && rows[a] >= 0; ++c) combined[a / 2 * 5 + c] += 3 * w[a] * xv[a / 2 * 5 + c];
  }
  expect_all_near(y, combined, 1e-15, 1e-14, "combine");
}

TEST(MoeOps, GroupedMatmulIsOneProductPerExpert) {
  Tensor x = random_tensor({7, 3}, 1);
  Tensor sizes = make_indices({3}, {2, 0, 4}, DType::I32);  // 6 of the 7 rows: the last is padding
  for (bool trans_b : {true, false}) {
    Tensor w = random_tensor(trans_b ? Shape{3, 5, 3} : Shape{3, 3, 5}, 2);
    Tensor y = run_ref("grouped_matmul", {x, w, sizes}, {{"trans_b", trans_b}})[0];
    std::vector<double> xv = values_of(x), wv = values_of(w), expected(35, 0.0);
    const int64_t group_of[] = {0, 0, 2, 2, 2, 2};
    for (size_t r = 0; r < 6; ++r) {
      for (size_t j = 0; j < 5; ++j) {
        for (size_t p = 0; p < 3; ++p) {
          const size_t e = static_cast<size_t>(group_of[r]);
          expected[r * 5 + j] += xv[r * 3 + p] * (trans_b ? wv[e * 15 + j * 3 + p] : wv[e * 15 + p * 5 + j]);
        }
      }
    }
    expect_all_near(y, expected, 1e-15, 1e-14, trans_b ? "x w^T" : "x w");
  }
  Tensor b = random_tensor({7, 5}, 3);
  Tensor dw = run_ref("grouped_matmul_weight_grad", {x, b, sizes})[0];
  ASSERT_EQ(dw.shape(), (Shape{3, 3, 5}));
  std::vector<double> xv = values_of(x), bv = values_of(b), expected(45, 0.0);
  for (size_t r = 0; r < 6; ++r) {
    const size_t e = r < 2 ? 0 : 2;
    for (size_t i = 0; i < 3; ++i) {
      for (size_t j = 0; j < 5; ++j) expected[e * 15 + i * 5 + j] += xv[r * 3 + i] * bv[r * 5 + j];
    }
  }
  expect_all_near(dw, expected, 1e-15, 1e-14, "a_e^T b_e (expert 1 empty: zeros)");
}

TEST(MoeOps, SigmoidGateScalesEachTokenByItsGate) {
  Tensor x = random_tensor({2, 3, 4}, 1), gate = random_tensor({2, 3, 1}, 2, 2.0);
  std::vector<double> xv = values_of(x), g = values_of(gate), expected(24);
  for (size_t i = 0; i < 24; ++i) expected[i] = xv[i] / (1 + std::exp(-g[i / 4]));
  expect_all_near(run_ref("sigmoid_gate", {x, gate})[0], expected, 0, 1e-15, "sigmoid(gate) * x");
}

// PyTorch's sigmoid(gate) * x in the data's dtype: the sigmoid rounded, then the product.
TEST(MoeOps, SigmoidGateRoundsTheSigmoidAsPyTorchDoes) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    Tensor x = random_tensor({3, 4}, 1).to(dtype), gate = random_tensor({3, 1}, 2, 2.0).to(dtype);
    Tensor dy = random_tensor({3, 4}, 3).to(dtype);
    std::vector<double> xv = values_of(x), g = values_of(gate), d = values_of(dy), s(3), dot(3, 0.0);
    for (size_t t = 0; t < 3; ++t) s[t] = values_of(make_tensor({}, {1 / (1 + std::exp(-g[t]))}).to(dtype))[0];
    std::vector<double> y(12), dx(12), dgate(3);
    for (size_t i = 0; i < 12; ++i) {
      y[i] = s[i / 4] * xv[i];
      dx[i] = s[i / 4] * d[i];
      dot[i / 4] += d[i] * xv[i];
    }
    for (size_t t = 0; t < 3; ++t) dgate[t] = s[t] * (1 - s[t]) * dot[t];
    auto rounded = [&](const std::vector<double>& values, const Shape& shape) {
      return values_of(make_tensor(shape, values).to(dtype));
    };
    const std::string what(dtype_name(dtype));
    expect_all_near(run_ref("sigmoid_gate", {x, gate})[0], rounded(y, {3, 4}), 0, 0, what + " y");
    Tensors grads = run_ref("sigmoid_gate_backward", {dy, x, gate});
    expect_all_near(grads[0], rounded(dx, {3, 4}), 0, 0, what + " dx");
    expect_all_near(grads[1], rounded(dgate, {3, 1}), 0, 0, what + " dgate");
  }
}

// transformers' load_balancing_loss_func over the layers' logits concatenated: softmax, top-k one-hot
// masks, tokens_per_expert = mean of the masks over tokens [k, E], router_prob_per_expert = mean of
// the probabilities [E], loss = E * sum(tokens_per_expert * router_prob_per_expert).
double transformers_balance_loss(const std::vector<Tensor>& layers, size_t experts, size_t k) {
  std::vector<std::vector<double>> probs;
  for (const Tensor& logits : layers) {
    std::vector<double> all = values_of(logits);
    for (size_t t = 0; t < all.size() / experts; ++t) {
      probs.push_back(softmax({all.begin() + static_cast<std::ptrdiff_t>(t * experts),
                               all.begin() + static_cast<std::ptrdiff_t>((t + 1) * experts)}));
    }
  }
  const auto tokens = static_cast<double>(probs.size());
  std::vector<double> tokens_per_expert(k * experts, 0.0), prob_per_expert(experts, 0.0);
  for (const std::vector<double>& p : probs) {
    std::vector<int64_t> chosen = top_k(p, k);
    for (size_t j = 0; j < k; ++j) tokens_per_expert[j * experts + static_cast<size_t>(chosen[j])] += 1 / tokens;
    for (size_t e = 0; e < experts; ++e) prob_per_expert[e] += p[e] / tokens;
  }
  double loss = 0;
  for (size_t j = 0; j < k; ++j) {
    for (size_t e = 0; e < experts; ++e) loss += tokens_per_expert[j * experts + e] * prob_per_expert[e];
  }
  return loss * static_cast<double>(experts);
}

TEST(MoeOps, AuxLossIsTransformersLoadBalancingLossOverAllLayers) {
  const int64_t experts = 5, k = 2;
  std::vector<Tensor> layers = {random_tensor({2, 3, experts}, 1, 1.5), random_tensor({2, 3, experts}, 2, 1.5)};
  Tensor prob_sum, z_sum, routed;
  double z_expected = 0;
  for (const Tensor& logits : layers) {
    Tensors terms = run_ref("moe_router_loss_terms", {logits});
    Tensor counts = run_ref("moe_route", {logits}, routing(k, "softmax", true))[4];
    const bool first = &logits == &layers.front();
    prob_sum = first ? terms[0] : run_ref("add", {prob_sum, terms[0]})[0];
    z_sum = first ? terms[1] : run_ref("add", {z_sum, terms[1]})[0];
    routed = first ? counts : run_ref("add", {routed, counts})[0];
    std::vector<double> all = values_of(logits);
    for (size_t t = 0; t < 6; ++t) {
      double max = -1e300, sum = 0;
      for (size_t e = 0; e < experts; ++e) max = std::max(max, all[t * experts + e]);
      for (size_t e = 0; e < experts; ++e) sum += std::exp(all[t * experts + e] - max);
      z_expected += std::pow(max + std::log(sum), 2) / 12;  // torch.logsumexp squared, mean over tokens
    }
  }
  const double aux_coef = 0.02, z_coef = 0.001;
  Tensors loss = run_ref("moe_aux_loss", {prob_sum, z_sum, routed},
                         {{"tokens", int64_t{12}}, {"aux_coef", aux_coef}, {"z_coef", z_coef}});
  const double balance = transformers_balance_loss(layers, experts, k);
  expect_all_near(loss[1], {balance}, 0, 1e-14, "balance");
  expect_all_near(loss[2], {z_expected}, 0, 1e-14, "z");
  expect_all_near(loss[0], {aux_coef * balance + z_coef * z_expected}, 0, 1e-14, "loss");
}

TEST(MoeOps, ErrorsNameTheOpTheInputAndTheAttr) {
  expect_error([] { run_ref("moe_route", {f64({4, 3})}, routing(4, "softmax", false)); },
               {"'moe_route'", "'top_k'", "[1, 3]"});
  expect_error([] { run_ref("moe_route", {f64({4, 3})}, routing(2, "softmin", false)); }, {"'scoring'", "softmin"});
  expect_error([] { run_ref("moe_route", {f64({4, 3})}, routing(2, "softmax", false, -1)); }, {"'capacity_factor'"});
  Tensor rows = make_indices({4, 2}, {0, 1, 2, 3, 4, 5, 6, 9}, DType::I32);
  expect_error([&] { run_ref("moe_permute", {f64({4, 3}), rows}); }, {"'moe_permute'", "'rows'", "9"});
  expect_error([&] { run_ref("moe_permute", {f64({5, 3}), rows}); }, {"'moe_permute'", "'rows'", "[5]"});
  expect_error([&] { run_ref("moe_combine", {f64({8, 3}), f64({4, 3}), rows}); }, {"'moe_combine'", "'weights'"});
  Tensor sizes = make_indices({2}, {3, 4}, DType::I32);
  expect_error([&] { run_ref("grouped_matmul", {f64({6, 3}), f64({2, 5, 3}), sizes}, {{"trans_b", true}}); },
               {"'grouped_matmul'", "'group_sizes'", "7", "6 rows"});
  expect_error([&] { run_ref("grouped_matmul", {f64({6, 3}), f64({2, 5, 4}), sizes}, {{"trans_b", true}}); },
               {"'grouped_matmul'", "inner sizes"});
  expect_error([&] { run_ref("grouped_matmul", {f64({6, 3}), f64({3, 5, 3}), sizes}, {{"trans_b", true}}); },
               {"'grouped_matmul'", "'group_sizes'", "[3]"});
  expect_error([] { run_ref("sigmoid_gate", {f64({2, 4}), f64({2, 4})}); }, {"'sigmoid_gate'", "'gate'", "[2, 1]"});
  expect_error([] { run_ref("moe_aux_loss", {f64({3}), f64({}), f64({4})},
                            {{"tokens", int64_t{4}}, {"aux_coef", 0.1}, {"z_coef", 0.0}}); },
               {"'moe_aux_loss'", "'routed'"});
}

}  // namespace
}  // namespace strata::testing
