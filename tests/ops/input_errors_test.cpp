// Bad inputs give errors whose message names the op and the input at fault:
// shape inference for shapes and attributes, the ref kernels for index values.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace strata::testing {
namespace {

TEST(ShapeErrors, ElementwiseOps) {
  expect_error([] { run_ref("add", {f64({2, 3}), f64({2})}); }, {"'add'", "b", "[2]", "[2, 3]"});
  expect_error([] { run_ref("add", {f64({3}), Tensor::zeros({3}, DType::F32)}); }, {"'add'", "'b'", "f32"});
  expect_error([] { run_ref("sum_to", {f64({2, 3})}, {{"shape", std::vector<int64_t>{2}}}); }, {"'sum_to'", "[2]"});
  expect_error([] { run_ref("gelu_backward", {f64({2, 3}), f64({3, 2})}); }, {"'gelu_backward'", "'x'", "[3, 2]"});
  expect_error([] { run_ref("scale", {Tensor::zeros({2}, DType::I32)}, {{"factor", 2.0}}); }, {"'scale'", "'x'"});
  expect_error([] { run_ref("scale", {f64({2})}); }, {"'scale'", "'factor'"});
}

TEST(ShapeErrors, MatmulAndLinear) {
  Attrs plain{{"trans_a", false}, {"trans_b", false}};
  expect_error([&] { run_ref("matmul", {f64({2, 3}), f64({4, 5})}, plain); }, {"'matmul'", "[2, 3]", "[4, 5]"});
  expect_error([&] { run_ref("matmul", {f64({2, 3}), f64({2, 3, 4})}, plain); }, {"'matmul'", "'b'"});
  expect_error([] { run_ref("matmul", {f64({2, 3}), f64({3, 4})}, {{"trans_a", true}, {"trans_b", false}}); },
               {"'matmul'", "leading dims"});
  expect_error([] { run_ref("linear", {f64({2, 3}), f64({3, 4}), f64({3})}); }, {"'linear'", "'bias'", "[4]"});
}

TEST(ShapeErrors, NormAndEmbedding) {
  expect_error([] { run_ref("layernorm", {f64({2, 4}), f64({3}), f64({4})}, {{"eps", 1e-5}}); },
               {"'layernorm'", "'gamma'", "[4]", "[3]"});
  expect_error([] { run_ref("layernorm_backward", {f64({2, 4}), f64({2, 4}), f64({4}), f64({3}), f64({2})}); },
               {"'layernorm_backward'", "'mean'"});
  expect_error([] { run_ref("embedding", {f64({5, 3}), f64({2})}); }, {"'embedding'", "'ids'", "f64"});
  expect_error([] { run_ref("embedding", {f64({5}), make_indices({2}, {0, 1})}); }, {"'embedding'", "'weight'"});
  expect_error(
      [] { run_ref("embedding_backward", {f64({3, 2}), make_indices({2}, {0, 1})}, {{"num_embeddings", int64_t{4}}}); },
      {"'embedding_backward'", "dout", "ids"});
  expect_error([] { run_ref("adamw", {Tensor::zeros({3}, DType::F32), f64({3}), Tensor::zeros({2}, DType::F32),
                                      Tensor::zeros({3}, DType::F32)},
                            {{"lr", 0.1}, {"beta1", 0.9}, {"beta2", 0.9}, {"eps", 1e-8}, {"weight_decay", 0.0},
                             {"step", int64_t{1}}, {"grad_scale", 1.0}}); },
               {"'adamw'", "'m'"});
}

TEST(ShapeErrors, AttentionAndLoss) {
  Attrs four_heads{{"n_head", int64_t{4}}};
  expect_error([&] { run_ref("attention", {f64({1, 2, 18})}, four_heads); }, {"'attention'", "n_head 4", "width 6"});
  expect_error([&] { run_ref("attention", {f64({1, 2, 7})}, four_heads); }, {"'attention'", "'qkv'"});
  expect_error([] { run_ref("attention", {f64({1, 2, 6})}); }, {"'attention'", "'n_head'"});
  expect_error([] { run_ref("attention_backward", {f64({1, 2, 2}), f64({1, 2, 6}), f64({1, 2, 2}), f64({1, 2})},
                            {{"n_head", int64_t{1}}}); },
               {"'attention_backward'", "'lse'"});
  expect_error([] { run_ref("attention_cached", {f64({1, 2, 4}), f64({1, 3, 4}), f64({1, 3, 4})},
                            {{"n_head", int64_t{2}}, {"position", int64_t{2}}}); },
               {"'attention_cached'", "position 2", "cache length 3"});
  expect_error([] { run_ref("attention_cached", {f64({1, 1, 4}), f64({1, 3, 2}), f64({1, 3, 2})},
                            {{"n_head", int64_t{2}}, {"position", int64_t{0}}}); },
               {"'attention_cached'", "k_cache"});
  expect_error([] { run_ref("cross_entropy", {f64({2, 3, 5}), make_indices({3, 2}, {0, 0, 0, 0, 0, 0})}); },
               {"'cross_entropy'", "logits", "targets"});
  expect_error([] { run_ref("cross_entropy_backward", {f64({1}), f64({2, 5}), make_indices({2}, {0, 0}), f64({2})}); },
               {"'cross_entropy_backward'", "'dloss'"});
}

TEST(IndexErrors, EmbeddingIdsOutsideTheVocabulary) {
  Tensor weight = f64({5, 3});
  expect_error([&] { run_ref("embedding", {weight, make_indices({2, 2}, {0, 1, 2, 5}, DType::I32)}); },
               {"'embedding'", "'ids'", "holds 5", "[1, 1]", "[0, 5)"});
  expect_error([&] { run_ref("embedding", {weight, make_indices({2, 2}, {0, 1, -1, 2})}); },
               {"'embedding'", "'ids'", "holds -1", "[1, 0]"});
  expect_error([] { run_ref("embedding_backward", {f64({3, 2}), make_indices({3}, {0, 4, 1})},
                            {{"num_embeddings", int64_t{4}}}); },
               {"'embedding_backward'", "'ids'", "holds 4", "[1]", "[0, 4)"});
}

TEST(IndexErrors, TargetsOutsideTheVocabulary) {
  Tensor logits = f64({2, 3, 7});
  Tensor targets = make_indices({2, 3}, {0, 1, 2, 3, 7, 4});
  expect_error([&] { run_ref("cross_entropy", {logits, targets}); },
               {"'cross_entropy'", "'targets'", "holds 7", "[1, 1]", "[0, 7)"});
  expect_error([&] { run_ref("cross_entropy_backward", {f64({}), logits, targets, f64({2, 3})}); },
               {"'cross_entropy_backward'", "'targets'", "holds 7", "[1, 1]"});
}

}  // namespace
}  // namespace strata::testing
