// Gradients on `ref` in f64 against central finite differences of the forward:
// for L(x) = sum(dy * f(x)) with random dy, <dL/dx, direction> must match
// (L(x + h d) - L(x - h d)) / 2h for random directions d. Backward ops are
// checked directly; ops without one (matmul, linear, add, sum_to, scale) through
// the compositions of other ops that express their gradients.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace strata::testing {
namespace {

const Attrs kPlain{{"trans_a", false}, {"trans_b", false}};
const Attrs kTransA{{"trans_a", true}, {"trans_b", false}};
const Attrs kTransB{{"trans_a", false}, {"trans_b", true}};

TEST(RefGradient, Gelu) {
  Tensor x = random_tensor({3, 4}, 1, 2.0);
  Tensor dy = random_tensor({3, 4}, 2);
  Tensor dx = run_ref("gelu_backward", {dy, x})[0];
  expect_gradient([](const Tensor& p) { return run_ref("gelu", {p})[0]; }, x, dy, dx, "gelu dx");
}

TEST(RefGradient, Layernorm) {
  Tensor x = random_tensor({2, 3, 5}, 1, 3.0);
  Tensor gamma = random_tensor({5}, 2);
  Tensor beta = random_tensor({5}, 3);
  Tensor dy = random_tensor({2, 3, 5}, 4);
  Attrs attrs{{"eps", 1e-5}};
  Tensors forward = run_ref("layernorm", {x, gamma, beta}, attrs);
  Tensors grads = run_ref("layernorm_backward", {dy, x, gamma, forward[1], forward[2]});
  expect_gradient([&](const Tensor& p) { return run_ref("layernorm", {p, gamma, beta}, attrs)[0]; }, x, dy, grads[0],
                  "layernorm dx");
  expect_gradient([&](const Tensor& p) { return run_ref("layernorm", {x, p, beta}, attrs)[0]; }, gamma, dy, grads[1],
                  "layernorm dgamma");
  expect_gradient([&](const Tensor& p) { return run_ref("layernorm", {x, gamma, p}, attrs)[0]; }, beta, dy, grads[2],
                  "layernorm dbeta");
}

TEST(RefGradient, Embedding) {
  Tensor weight = random_tensor({5, 3}, 1);
  Tensor ids = make_indices({2, 3}, {4, 1, 4, 0, 1, 4}, DType::I32);
  Tensor dy = random_tensor({2, 3, 3}, 2);
  Tensor dweight = run_ref("embedding_backward", {dy, ids}, {{"num_embeddings", int64_t{5}}})[0];
  expect_gradient([&](const Tensor& p) { return run_ref("embedding", {p, ids})[0]; }, weight, dy, dweight,
                  "embedding dweight");
}

TEST(RefGradient, CrossEntropy) {
  Tensor logits = random_tensor({2, 3, 7}, 1, 2.0);
  Tensor targets = make_indices({2, 3}, {0, 6, 3, 3, 1, 5});
  Tensor dloss = make_tensor({}, {0.7});
  Tensor lse = run_ref("cross_entropy", {logits, targets})[1];
  Tensor dlogits = run_ref("cross_entropy_backward", {dloss, logits, targets, lse})[0];
  expect_gradient([&](const Tensor& p) { return run_ref("cross_entropy", {p, targets})[0]; }, logits, dloss, dlogits,
                  "cross_entropy dlogits");
}

TEST(RefGradient, Attention) {
  Attrs attrs{{"n_head", int64_t{2}}};
  Tensor qkv = random_tensor({2, 4, 18}, 1);
  Tensor dout = random_tensor({2, 4, 6}, 2);
  Tensors forward = run_ref("attention", {qkv}, attrs);
  Tensor dqkv = run_ref("attention_backward", {dout, qkv, forward[0], forward[1]}, attrs)[0];
  expect_gradient([&](const Tensor& p) { return run_ref("attention", {p}, attrs)[0]; }, qkv, dout, dqkv,
                  "attention dqkv");
}

TEST(RefGradient, MatmulPlain) {
  Tensor a = random_tensor({2, 3, 4}, 1);
  Tensor b = random_tensor({4, 5}, 2);
  Tensor dout = random_tensor({2, 3, 5}, 3);
  Tensor da = run_ref("matmul", {dout, b}, kTransB)[0];
  Tensor db = run_ref("matmul", {a, dout}, kTransA)[0];
  expect_gradient([&](const Tensor& p) { return run_ref("matmul", {p, b}, kPlain)[0]; }, a, dout, da, "a b: da");
  expect_gradient([&](const Tensor& p) { return run_ref("matmul", {a, p}, kPlain)[0]; }, b, dout, db, "a b: db");
}

TEST(RefGradient, MatmulTransB) {
  Tensor a = random_tensor({2, 3, 4}, 1);
  Tensor b = random_tensor({5, 4}, 2);
  Tensor dout = random_tensor({2, 3, 5}, 3);
  Tensor da = run_ref("matmul", {dout, b}, kPlain)[0];
  Tensor db = run_ref("matmul", {dout, a}, kTransA)[0];
  expect_gradient([&](const Tensor& p) { return run_ref("matmul", {p, b}, kTransB)[0]; }, a, dout, da, "a b^T: da");
  expect_gradient([&](const Tensor& p) { return run_ref("matmul", {a, p}, kTransB)[0]; }, b, dout, db, "a b^T: db");
}

TEST(RefGradient, MatmulTransA) {
  Tensor a = random_tensor({2, 3, 4}, 1);
  Tensor b = random_tensor({2, 3, 5}, 2);
  Tensor dout = random_tensor({4, 5}, 3);
  Tensor da = run_ref("matmul", {b, dout}, kTransB)[0];
  Tensor db = run_ref("matmul", {a, dout}, kPlain)[0];
  expect_gradient([&](const Tensor& p) { return run_ref("matmul", {p, b}, kTransA)[0]; }, a, dout, da, "a^T b: da");
  expect_gradient([&](const Tensor& p) { return run_ref("matmul", {a, p}, kTransA)[0]; }, b, dout, db, "a^T b: db");
}

TEST(RefGradient, Linear) {
  Tensor x = random_tensor({2, 3, 4}, 1);
  Tensor w = random_tensor({4, 5}, 2);
  Tensor bias = random_tensor({5}, 3);
  Tensor dy = random_tensor({2, 3, 5}, 4);
  Tensor dx = run_ref("matmul", {dy, w}, kTransB)[0];
  Tensor dw = run_ref("matmul", {x, dy}, kTransA)[0];
  Tensor dbias = run_ref("sum_to", {dy}, {{"shape", std::vector<int64_t>{5}}})[0];
  expect_gradient([&](const Tensor& p) { return run_ref("linear", {p, w, bias})[0]; }, x, dy, dx, "linear dx");
  expect_gradient([&](const Tensor& p) { return run_ref("linear", {x, p, bias})[0]; }, w, dy, dw, "linear dw");
  expect_gradient([&](const Tensor& p) { return run_ref("linear", {x, w, p})[0]; }, bias, dy, dbias, "linear dbias");
}

TEST(RefGradient, AddWithBroadcast) {
  Tensor a = random_tensor({2, 3, 4}, 1);
  Tensor b = random_tensor({3, 4}, 2);
  Tensor dy = random_tensor({2, 3, 4}, 3);
  Tensor db = run_ref("sum_to", {dy}, {{"shape", std::vector<int64_t>{3, 4}}})[0];
  expect_gradient([&](const Tensor& p) { return run_ref("add", {p, b})[0]; }, a, dy, dy, "add da");
  expect_gradient([&](const Tensor& p) { return run_ref("add", {a, p})[0]; }, b, dy, db, "add db");
}

TEST(RefGradient, SumToAndScale) {
  Tensor x = random_tensor({2, 3, 4}, 1);
  Tensor dy = random_tensor({4}, 2);
  Attrs to_last{{"shape", std::vector<int64_t>{4}}};
  // The gradient of a sum is the broadcast of dy back over the summed dims.
  Tensor dx = run_ref("add", {Tensor::zeros({2, 3, 4}, DType::F64), dy})[0];
  expect_gradient([&](const Tensor& p) { return run_ref("sum_to", {p}, to_last)[0]; }, x, dy, dx, "sum_to dx");

  Tensor dz = random_tensor({2, 3, 4}, 3);
  Tensor dscaled = run_ref("scale", {dz}, {{"factor", -1.5}})[0];
  expect_gradient([&](const Tensor& p) { return run_ref("scale", {p}, {{"factor", -1.5}})[0]; }, x, dz, dscaled,
                  "scale dx");
}

TEST(RefGradient, RmsNorm) {
  Tensor x = random_tensor({2, 3, 5}, 1, 3.0);
  Tensor weight = random_tensor({5}, 2);
  Tensor dy = random_tensor({2, 3, 5}, 3);
  Attrs attrs{{"eps", 1e-5}};
  Tensors grads = run_ref("rms_norm_backward", {dy, x, weight}, attrs);
  expect_gradient([&](const Tensor& p) { return run_ref("rms_norm", {p, weight}, attrs)[0]; }, x, dy, grads[0],
                  "rms_norm dx");
  expect_gradient([&](const Tensor& p) { return run_ref("rms_norm", {x, p}, attrs)[0]; }, weight, dy, grads[1],
                  "rms_norm dweight");
}

// rope's gradient is rope with `inverse` flipped (graph/grad_rules.cpp), in both directions.
TEST(RefGradient, RopeIsItsInverseRotation) {
  Tensor x = random_tensor({2, 3, 12}, 1);  // two heads of 6
  Tensor dy = random_tensor({2, 3, 12}, 2);
  Tensor positions = make_indices({3}, {0, 5, 130}, DType::I32);
  // theta 1e4, D 6: wavelengths 6.3, 135 and 2920, one in each llama3 band for 512 original positions.
  Attrs attrs{{"head_dim", int64_t{6}}, {"theta", 1e4},           {"scaling", std::string("llama3")},
              {"factor", 8.0},          {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
              {"original_max_positions", int64_t{512}}};
  for (bool inverse : {false, true}) {
    Attrs forward = attrs, backward = attrs;
    forward.set("inverse", inverse);
    backward.set("inverse", !inverse);
    Tensor dx = run_ref("rope", {dy, positions}, backward)[0];
    expect_gradient([&](const Tensor& p) { return run_ref("rope", {p, positions}, forward)[0]; }, x, dy, dx,
                    inverse ? "rope (inverse) dx" : "rope dx");
  }
}

TEST(RefGradient, Swiglu) {
  Tensor gate = random_tensor({3, 7}, 1, 3.0);
  Tensor up = random_tensor({3, 7}, 2);
  Tensor dy = random_tensor({3, 7}, 3);
  Tensors grads = run_ref("swiglu_backward", {dy, gate, up});
  expect_gradient([&](const Tensor& p) { return run_ref("swiglu", {p, up})[0]; }, gate, dy, grads[0], "swiglu dgate");
  expect_gradient([&](const Tensor& p) { return run_ref("swiglu", {gate, p})[0]; }, up, dy, grads[1], "swiglu dup");
}

}  // namespace
}  // namespace strata::testing
