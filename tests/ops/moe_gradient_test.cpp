// The mixture-of-experts ops' gradients on `ref` in f64 against central finite differences of their
// forwards (op_test_util.h's expect_gradient), and grouped_matmul's through the ops its gradient rule
// composes (grouped_matmul with the other transpose, grouped_matmul_weight_grad).
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace strata::testing {
namespace {

Attrs routing(int64_t top_k, const std::string& scoring, bool norm, double capacity = 0) {
  return {{"top_k", top_k}, {"scoring", scoring}, {"norm_topk_prob", norm}, {"capacity_factor", capacity}};
}

TEST(MoeGradient, RouteWeightsToLogits) {
  Tensor logits = random_tensor({2, 3, 5}, 1, 2.0);
  Tensor dweights = random_tensor({2, 3, 2}, 2);
  for (const std::string scoring : {"softmax", "sigmoid"}) {
    for (bool norm : {false, true}) {
      const Attrs attrs = routing(2, scoring, norm);
      Tensor experts = run_ref("moe_route", {logits}, attrs)[1];
      Tensor dlogits = run_ref("moe_route_backward", {dweights, logits, experts}, attrs)[0];
      // Random logits have no near ties: a step of 1e-5 keeps every token's choice.
      expect_gradient([&](const Tensor& p) { return run_ref("moe_route", {p}, attrs)[0]; }, logits, dweights, dlogits,
                      scoring + (norm ? " normalised" : "") + " dlogits");
    }
  }
}

TEST(MoeGradient, RouterLossTermsToLogits) {
  Tensor logits = random_tensor({2, 3, 4}, 1, 2.0);
  Tensor dprob_sum = random_tensor({4}, 2), dz_sum = make_tensor({}, {0.3});
  Tensor dlogits = run_ref("moe_router_loss_terms_backward", {dprob_sum, dz_sum, logits})[0];
  // <dprob_sum, prob_sum> + dz_sum z_sum as one sum: both outputs laid end to end.
  auto both = [](const Tensor& p) {
    Tensors terms = run_ref("moe_router_loss_terms", {p});
    std::vector<double> values = values_of(terms[0]);
    values.push_back(values_of(terms[1])[0]);
    return make_tensor({static_cast<int64_t>(values.size())}, values);
  };
  std::vector<double> dy = values_of(dprob_sum);
  dy.push_back(0.3);
  expect_gradient(both, logits, make_tensor({5}, dy), dlogits, "loss terms dlogits");
}

TEST(MoeGradient, AuxLossToItsTerms) {
  const Attrs attrs{{"tokens", int64_t{7}}, {"aux_coef", 0.02}, {"z_coef", 0.003}};
  Tensor prob_sum = random_tensor({4}, 1), z_sum = make_tensor({}, {2.5}), routed = make_tensor({4}, {5, 1, 0, 8});
  Tensor dloss = make_tensor({}, {1.7});
  Tensors grads = run_ref("moe_aux_loss_backward", {dloss, routed}, attrs);
  expect_gradient([&](const Tensor& p) { return run_ref("moe_aux_loss", {p, z_sum, routed}, attrs)[0]; }, prob_sum,
                  dloss, grads[0], "dprob_sum");
  expect_gradient([&](const Tensor& p) { return run_ref("moe_aux_loss", {prob_sum, p, routed}, attrs)[0]; }, z_sum,
                  dloss, grads[1], "dz_sum");
}

TEST(MoeGradient, PermuteAndCombine) {
  for (double capacity : {0.0, 0.9}) {  // 0.9: 3 rows per expert
    SCOPED_TRACE("capacity " + std::to_string(capacity));
    Tensor logits = random_tensor({6, 4}, 1, 2.0);
    Tensors route = run_ref("moe_route", {logits}, routing(2, "softmax", false, capacity));
    Tensor x = random_tensor({6, 3}, 2), dxs = random_tensor({12, 3}, 3);
    Tensor dx = run_ref("moe_permute_backward", {dxs, route[2]})[0];
    expect_gradient([&](const Tensor& p) { return run_ref("moe_permute", {p, route[2]})[0]; }, x, dxs, dx, "dx");
    Tensor ys = random_tensor({12, 3}, 4), dy = random_tensor({6, 3}, 5);
    Tensors grads = run_ref("moe_combine_backward", {dy, ys, route[0], route[2]});
    expect_gradient([&](const Tensor& p) { return run_ref("moe_combine", {p, route[0], route[2]})[0]; }, ys, dy,
                    grads[0], "dys");
    expect_gradient([&](const Tensor& p) { return run_ref("moe_combine", {ys, p, route[2]})[0]; }, route[0], dy,
                    grads[1], "dweights");
  }
}

TEST(MoeGradient, GroupedMatmulThroughItsRule) {
  Tensor x = random_tensor({7, 3}, 1), dy = random_tensor({7, 5}, 2);
  Tensor sizes = make_indices({3}, {2, 0, 4}, DType::I32);
  for (bool trans_b : {true, false}) {
    SCOPED_TRACE(trans_b ? "x w^T" : "x w");
    const Attrs attrs{{"trans_b", trans_b}};
    Tensor w = random_tensor(trans_b ? Shape{3, 5, 3} : Shape{3, 3, 5}, 3);
    Tensor dx = run_ref("grouped_matmul", {dy, w, sizes}, {{"trans_b", !trans_b}})[0];
    Tensor dw = trans_b ? run_ref("grouped_matmul_weight_grad", {dy, x, sizes})[0]
                        : run_ref("grouped_matmul_weight_grad", {x, dy, sizes})[0];
    expect_gradient([&](const Tensor& p) { return run_ref("grouped_matmul", {p, w, sizes}, attrs)[0]; }, x, dy, dx,
                    "dx");
    expect_gradient([&](const Tensor& p) { return run_ref("grouped_matmul", {x, p, sizes}, attrs)[0]; }, w, dy, dw,
                    "dw");
  }
}

TEST(MoeGradient, SigmoidGate) {
  Tensor x = random_tensor({2, 3, 4}, 1), gate = random_tensor({2, 3, 1}, 2, 2.0), dy = random_tensor({2, 3, 4}, 3);
  Tensors grads = run_ref("sigmoid_gate_backward", {dy, x, gate});
  expect_gradient([&](const Tensor& p) { return run_ref("sigmoid_gate", {p, gate})[0]; }, x, dy, grads[0], "dx");
  expect_gradient([&](const Tensor& p) { return run_ref("sigmoid_gate", {x, p})[0]; }, gate, dy, grads[1], "dgate");
}

}  // namespace
}  // namespace strata::testing
