// The mixture-of-experts kernels on cpu against ref, on sizes past the kernels' chunks (256 tokens for
// the router, 128-row blocks for the grouped GEMM), with empty experts, a capacity that drops, and bf16
// (sigmoid_gate and the grouped GEMM native; the rest widened through the f32 kernels). Integer outputs (the experts, the
// dispatch plan) must be equal; f32 outputs within 2e-6 of |expected| + rms (the router's exp and the
// sgemm's f32 sums against ref's f64: measured below 4e-7), bf16 within one bf16 ulp (2^-7). Every
// comparison also runs cpu twice for the same bits, and the reductions are checked on other thread
// counts.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <numeric>

#include "cpu_test_util.h"

namespace strata::testing {
namespace {

constexpr double kF32Tol = 2e-6;
constexpr double kBf16Tol = 1.0 / 128;

Attrs routing(int64_t top_k, const std::string& scoring, bool norm, double capacity) {
  return {{"top_k", top_k}, {"scoring", scoring}, {"norm_topk_prob", norm}, {"capacity_factor", capacity}};
}

TEST(CpuMoe, RouterMatchesRef) {
  const Tensor logits = random_f32({3, 100, 8}, 1, 2.0f);
  for (const std::string scoring : {"softmax", "sigmoid"}) {
    for (bool norm : {false, true}) {
      for (double capacity : {0.0, 0.9}) {  // 0.9: 68 of the 75 rows an expert averages
        const std::string what = scoring + (norm ? " normalised" : "") + " capacity " + std::to_string(capacity);
        const Attrs attrs = routing(2, scoring, norm, capacity);
        Tensors route = check_against_ref("moe_route", {logits}, attrs, kF32Tol, what);
        Tensor dweights = random_f32({3, 100, 2}, 2);
        check_against_ref("moe_route_backward", {dweights, logits, route[1]}, attrs, kF32Tol, what + " backward");
      }
    }
  }
}

TEST(CpuMoe, RouterLossesMatchRef) {
  const Tensor logits = random_f32({600, 8}, 1, 2.0f);
  Tensors terms = check_against_ref("moe_router_loss_terms", {logits}, {}, kF32Tol, "loss terms");
  check_against_ref("moe_router_loss_terms_backward", {random_f32({8}, 2), random_f32({}, 3), logits}, {}, kF32Tol,
                    "loss terms backward");
  Tensor routed = run_on("ref", "moe_route", {logits}, routing(2, "softmax", true, 0))[4];
  const Attrs aux{{"tokens", int64_t{600}}, {"aux_coef", 0.02}, {"z_coef", 0.001}};
  check_against_ref("moe_aux_loss", {terms[0], terms[1], routed}, aux, kF32Tol, "aux loss");
  check_against_ref("moe_aux_loss_backward", {random_f32({}, 4), routed}, aux, kF32Tol, "aux loss backward");
  int threads = omp_get_max_threads();
  for (int count : {1, 3}) {
    omp_set_num_threads(count);
    Tensors again = run_on("cpu", "moe_router_loss_terms", {logits});
    expect_identical(again[0], terms[0], "prob_sum on " + std::to_string(count) + " threads");
    expect_identical(again[1], terms[1], "z_sum on " + std::to_string(count) + " threads");
  }
  omp_set_num_threads(threads);
}

TEST(CpuMoe, PermuteAndCombineMatchRef) {
  const Tensor logits = random_f32({2, 75, 6}, 1, 2.0f);
  for (double capacity : {0.0, 0.79}) {  // 0.79: 40 rows per expert
    const std::string what = "capacity " + std::to_string(capacity);
    Tensors route = run_on("ref", "moe_route", {logits}, routing(2, "softmax", false, capacity));
    const Tensor x = random_f32({2, 75, 37}, 2), rows_grad = random_f32({300, 37}, 3);
    check_against_ref("moe_permute", {x, route[2]}, {}, kF32Tol, what + " permute");
    check_against_ref("moe_permute_backward", {rows_grad, route[2]}, {}, kF32Tol, what + " permute backward");
    check_against_ref("moe_combine", {rows_grad, route[0], route[2]}, {}, kF32Tol, what + " combine");
    check_against_ref("moe_combine_backward", {x, rows_grad, route[0], route[2]}, {}, kF32Tol,
                      what + " combine backward");
  }
}

TEST(CpuMoe, GroupedMatmulMatchesRefOnAnyThreadCount) {
  // 300 rows: expert 0 empty, expert 2 over two 128-row blocks, 11 padding rows at the end.
  const std::vector<int32_t> groups = {0, 40, 200, 49};
  Tensor group_sizes = Tensor::empty({4}, DType::I32);
  std::copy(groups.begin(), groups.end(), group_sizes.data<int32_t>());
  const Tensor x = random_f32({300, 33}, 1), dy = random_f32({300, 19}, 2);
  for (bool trans_b : {true, false}) {
    const Tensor w = random_f32(trans_b ? Shape{4, 19, 33} : Shape{4, 33, 19}, 3);
    Tensor y = check_against_ref("grouped_matmul", {x, w, group_sizes}, {{"trans_b", trans_b}}, kF32Tol,
                                 trans_b ? "x w^T" : "x w")[0];
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    expect_identical(run_on("cpu", "grouped_matmul", {x, w, group_sizes}, {{"trans_b", trans_b}})[0], y,
                     "one thread");
    omp_set_num_threads(threads);
  }
  check_against_ref("grouped_matmul_weight_grad", {dy, x, group_sizes}, {}, kF32Tol, "weight grad");
}

TEST(CpuMoe, Bf16GroupedMatmulMatchesRef) {
  // As above: an empty expert, an expert of 200 rows, padding rows at the end.
  const std::vector<int32_t> groups = {0, 40, 200, 49};
  Tensor group_sizes = Tensor::empty({4}, DType::I32);
  std::copy(groups.begin(), groups.end(), group_sizes.data<int32_t>());
  const Tensor x = random_f32({300, 33}, 1).to(DType::BF16), dy = random_f32({300, 19}, 2).to(DType::BF16);
  for (bool trans_b : {true, false}) {
    const Tensor w = random_f32(trans_b ? Shape{4, 19, 33} : Shape{4, 33, 19}, 3).to(DType::BF16);
    Tensor y = check_against_ref("grouped_matmul", {x, w, group_sizes}, {{"trans_b", trans_b}}, kBf16Tol,
                                 trans_b ? "bf16 x w^T" : "bf16 x w")[0];
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    expect_identical(run_on("cpu", "grouped_matmul", {x, w, group_sizes}, {{"trans_b", trans_b}})[0], y,
                     "bf16 on one thread");
    omp_set_num_threads(threads);
  }
  Tensor dw = check_against_ref("grouped_matmul_weight_grad", {dy, x, group_sizes}, {}, kBf16Tol, "bf16 weight grad")[0];
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  expect_identical(run_on("cpu", "grouped_matmul_weight_grad", {dy, x, group_sizes})[0], dw, "bf16 weight grad on one thread");
  omp_set_num_threads(threads);
}

// Many small experts on every thread at once: oneDNN runs one primitive per shape for all of them
// concurrently (a bf16-output primitive with a runtime dimension shares its sums between concurrent
// executions in oneDNN 2.6; this caught it).
TEST(CpuMoe, Bf16GroupedMatmulMatchesRefWithManyExperts) {
  std::vector<int32_t> groups(32);
  for (size_t e = 0; e < groups.size(); ++e) groups[e] = static_cast<int32_t>(7 + 13 * e % 29);
  Tensor group_sizes = Tensor::empty({32}, DType::I32);
  std::copy(groups.begin(), groups.end(), group_sizes.data<int32_t>());
  const int64_t rows = std::accumulate(groups.begin(), groups.end(), int64_t{0});
  const Tensor x = random_f32({rows, 64}, 1).to(DType::BF16), dy = random_f32({rows, 48}, 2).to(DType::BF16);
  const Tensor w = random_f32({32, 48, 64}, 3).to(DType::BF16);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(std::max(threads, 2));
  check_against_ref("grouped_matmul", {x, w, group_sizes}, {{"trans_b", true}}, kBf16Tol, "many experts");
  check_against_ref("grouped_matmul_weight_grad", {dy, x, group_sizes}, {}, kBf16Tol, "many experts' weight grad");
  omp_set_num_threads(threads);
}

// The bf16 ops that cpu runs through its f32 kernels (emulated: allowed here) against ref.
Tensors emulated_against_ref(const std::string& op, const Tensors& inputs, const Attrs& attrs,
                             const std::string& what) {
  static std::unique_ptr<Dispatcher> cpu = make_dispatcher("cpu", FallbackPolicy::Allow);
  Tensors actual = cpu->call(op, inputs, attrs), expected = run_on("ref", op, inputs, attrs);
  for (size_t i = 0; i < actual.size(); ++i) expect_close(actual[i], expected[i], kBf16Tol, what);
  return actual;
}

TEST(CpuMoe, Bf16MatchesRef) {
  const DType bf16 = DType::BF16;
  const Tensor logits = random_f32({50, 8}, 1, 2.0f).to(bf16);
  Tensors route = emulated_against_ref("moe_route", {logits}, routing(2, "softmax", true, 0), "route");
  const Tensor x = random_f32({50, 24}, 2).to(bf16);
  Tensor xs = emulated_against_ref("moe_permute", {x, route[2]}, {}, "permute")[0];
  Tensor w = random_f32({8, 16, 24}, 3).to(bf16);
  Tensor ys = check_against_ref("grouped_matmul", {xs, w, route[3]}, {{"trans_b", true}}, kBf16Tol, "grouped")[0];
  emulated_against_ref("moe_combine", {ys, route[0], route[2]}, {}, "combine");
  const Tensor gate = random_f32({50, 1}, 4, 2.0f).to(bf16), dy = random_f32({50, 24}, 5).to(bf16);
  check_against_ref("sigmoid_gate", {x, gate}, {}, kBf16Tol, "sigmoid_gate");
  check_against_ref("sigmoid_gate_backward", {dy, x, gate}, {}, kBf16Tol, "sigmoid_gate backward");
}

TEST(CpuMoe, SigmoidGateMatchesRef) {
  const Tensor x = random_f32({3, 70, 45}, 1), gate = random_f32({3, 70, 1}, 2, 3.0f), dy = random_f32({3, 70, 45}, 3);
  check_against_ref("sigmoid_gate", {x, gate}, {}, kF32Tol, "forward");
  check_against_ref("sigmoid_gate_backward", {dy, x, gate}, {}, kF32Tol, "backward");
}

}  // namespace
}  // namespace strata::testing
