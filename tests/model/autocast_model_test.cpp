// The precision policy as the GPT-2 graph sees it: which dtype each op
// computes in under bf16 autocast, with the default and an overridden list of
// f32 ops, and that gradients reaching the (f32 master) params are f32.
#include <gtest/gtest.h>

#include <map>

#include "model/model_graph.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

ModelConfig tiny() { return testing::gpt2_config(2, 2, 32, 64, 8); }

// op -> the set of dtypes of its dtype-selecting input over the whole graph.
std::map<std::string, std::set<DType>> compute_dtypes(const Graph& graph) {
  std::map<std::string, std::set<DType>> dtypes;
  for (const Node& node : graph.nodes()) {
    size_t selecting = OpRegistry::global().get(node.op).dtype_input;
    dtypes[node.op].insert(graph.value(node.inputs.at(selecting)).meta.dtype);
  }
  return dtypes;
}

TEST(Autocast, DefaultBf16PolicyRunsGemmsAndAttentionInBf16AndNormsInF32) {
  ModelBuildOptions options{.precision = PrecisionPolicy::parse("bf16", default_fp32_ops(), "k")};
  ModelGraph model = build_model_graph(tiny(), 2, 8, true, options);
  auto dtypes = compute_dtypes(model.graph);
  for (const char* op : {"linear", "matmul", "attention", "attention_backward", "gelu", "gelu_backward"}) {
    EXPECT_EQ(dtypes[op], std::set<DType>{DType::BF16}) << op;
  }
  for (const char* op : {"layernorm", "layernorm_backward", "embedding"}) {
    EXPECT_EQ(dtypes[op], std::set<DType>{DType::F32}) << op;
  }
  // Cross-entropy widens bf16 logits to f32 as it reads them: no cast, an f32 loss.
  EXPECT_EQ(dtypes["cross_entropy"], std::set<DType>{DType::BF16});
  EXPECT_EQ(model.graph.value(model.loss).meta.dtype, DType::F32);
  for (int param : model.params) {
    EXPECT_EQ(model.graph.value(param).meta.dtype, DType::F32);
    EXPECT_EQ(model.graph.value(model.grads.of.at(param)).meta.dtype, DType::F32) << model.graph.value(param).name;
  }
}

TEST(Autocast, Fp32OpsListMovesOpsBackToF32) {
  ModelBuildOptions options{.precision = PrecisionPolicy::parse(
                               "bf16", {"layernorm", "cross_entropy", "embedding", "linear", "attention"}, "k")};
  auto dtypes = compute_dtypes(build_model_graph(tiny(), 2, 8, true, options).graph);
  EXPECT_EQ(dtypes["linear"], std::set<DType>{DType::F32});
  EXPECT_EQ(dtypes["attention"], std::set<DType>{DType::F32});
  EXPECT_EQ(dtypes["gelu"], std::set<DType>{DType::BF16});  // still low: not in the list
  // lm_head (matmul) stays bf16; the backward matmuls of the f32 linears are f32.
  EXPECT_EQ(dtypes["matmul"], (std::set<DType>{DType::F32, DType::BF16}));
}

TEST(Autocast, Fp32PolicyInsertsNoCasts) {
  ModelGraph model = build_model_graph(tiny(), 2, 8, true, ModelBuildOptions{});
  EXPECT_EQ(compute_dtypes(model.graph).count("cast"), 0u);
}

TEST(Autocast, UnknownOpInTheListIsNamed) {
  try {
    PrecisionPolicy::parse("bf16", {"layernrom"}, "precision.fp32_ops");
    FAIL() << "accepted an unknown op";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("precision.fp32_ops"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("layernrom"), std::string::npos);
  }
}

}  // namespace
}  // namespace strata
