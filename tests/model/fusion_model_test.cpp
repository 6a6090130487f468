// The fusion passes on GPT-2 training graphs: which patterns they find, how
// many nodes they remove, and that the fused graph computes the unfused
// graph's loss and gradients. The fused ops keep every rounding of the ops they
// replace, so the only differences are the f32 kernels' own (FMA contraction,
// reduction order), far below the tolerances here.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "backends/backends.h"
#include "core/rng.h"
#include "graph/executor.h"
#include "graph/fusion.h"
#include "model/model_graph.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

// Width 40: not a multiple of 16.
ModelConfig config() { return testing::gpt2_config(3, 2, 40, 37, 12); }

ModelGraph training_graph(const std::string& precision) {
  ModelBuildOptions options;
  options.precision = PrecisionPolicy::parse(precision, default_fp32_ops(), "precision.fp32_ops");
  return build_model_graph(config(), 3, 11, /*training=*/true, options);
}

std::set<int> kept(const ModelGraph& model) {
  std::set<int> values{model.loss, model.logits};
  for (const auto& [param, grad] : model.grads.of) values.insert(grad);
  return values;
}

int count_op(const Graph& graph, const std::string& op) {
  int count = 0;
  for (const Node& node : graph.nodes()) count += node.op == op ? 1 : 0;
  return count;
}

int count_fused_elementwise(const Graph& graph) {
  int count = 0;
  for (const Node& node : graph.nodes()) count += node.op.rfind("fused_elementwise", 0) == 0 ? 1 : 0;
  return count;
}

// Loss then every gradient (params order) of one step, as f64.
std::vector<Tensor> run_step(const ModelGraph& model, const Graph& graph, const std::vector<int>& map) {
  std::unique_ptr<Dispatcher> dispatcher = make_dispatcher("cpu", FallbackPolicy::Allow);
  auto mapped = [&](int value) { return map.empty() ? value : map.at(static_cast<size_t>(value)); };
  std::set<int> keep;
  for (int value : kept(model)) keep.insert(mapped(value));
  CompiledGraph compiled(graph, *dispatcher, keep);
  ParameterSet params(model_param_specs(config()));
  params.initialise(CounterRng(5));
  for (size_t i = 0; i < params.size(); ++i) compiled.bind(mapped(model.params[i]), params.tensor(i));
  const Shape& shape = model.graph.value(model.tokens).meta.shape;
  Tensor tokens = Tensor::empty(shape, DType::I32), targets = Tensor::empty(shape, DType::I32);
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    tokens.data<int32_t>()[i] = static_cast<int32_t>((7 * i + 3) % config().vocab_size);
    targets.data<int32_t>()[i] = static_cast<int32_t>((5 * i + 1) % config().vocab_size);
  }
  Tensor seed = Tensor::empty({}, DType::F32);
  seed.data<float>()[0] = 1.0f;
  compiled.bind(mapped(model.tokens), tokens);
  compiled.bind(mapped(model.targets), targets);
  compiled.bind(mapped(model.positions), position_ids(shape[1]));
  compiled.bind(mapped(model.grads.seed), seed);
  compiled.run();
  std::vector<Tensor> results{compiled.tensor(mapped(model.loss)).to(DType::F64)};
  for (int param : model.params) results.push_back(compiled.tensor(mapped(model.grads.of.at(param))).to(DType::F64));
  return results;
}

// Each element within tol * (|expected| + rms of the tensor).
void expect_close(const Tensor& actual, const Tensor& expected, double tol, const std::string& what) {
  const double* a = actual.data<double>();
  const double* e = expected.data<double>();
  double squares = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) squares += e[i] * e[i];
  double rms = std::sqrt(squares / static_cast<double>(std::max<int64_t>(1, expected.numel())));
  for (int64_t i = 0; i < expected.numel(); ++i) {
    ASSERT_LE(std::fabs(a[i] - e[i]), tol * (std::fabs(e[i]) + rms)) << what << " element " << i;
  }
}

void expect_same_step(const ModelGraph& model, const GraphRewriter::Result& fused, double tol) {
  std::vector<Tensor> unfused_step = run_step(model, model.graph, {});
  std::vector<Tensor> fused_step = run_step(model, fused.graph, fused.value_map);
  expect_close(fused_step[0], unfused_step[0], tol, "loss");
  for (size_t i = 1; i < fused_step.size(); ++i) {
    expect_close(fused_step[i], unfused_step[i], tol, model.graph.value(model.params[i - 1]).name + " gradient");
  }
}

TEST(GPT2Fusion, Fp32FusesEveryResidualNormAndGradientAccumulation) {
  ModelGraph model = training_graph("fp32");
  GraphRewriter::Result fused = fuse_all(model.graph, kept(model));
  const int layers = static_cast<int>(config().n_layer);
  // Every norm reads a residual sum (layer 0's ln_1 the embedding sum), and
  // every norm but ln_f has its dx added to a residual gradient.
  EXPECT_EQ(count_op(fused.graph, "add_layernorm"), 2 * layers + 1);
  EXPECT_EQ(count_op(fused.graph, "layernorm"), 0);
  EXPECT_EQ(count_op(fused.graph, "layernorm_backward_add"), 2 * layers);
  EXPECT_EQ(count_op(fused.graph, "layernorm_backward"), 1);
  // The fp32 graph has no other element-wise chain: gelu and gelu_backward
  // read GEMM outputs and feed GEMMs.
  EXPECT_EQ(count_fused_elementwise(fused.graph), 0);
  EXPECT_EQ(model.graph.num_nodes() - fused.graph.num_nodes(), 4 * layers + 1);
  expect_same_step(model, fused, 1e-5);
}

TEST(GPT2Fusion, Bf16AbsorbsCastsAndFusesElementwiseChains) {
  ModelGraph model = training_graph("bf16");
  GraphRewriter::Result fused = fuse_all(model.graph, kept(model));
  const int layers = static_cast<int>(config().n_layer);
  EXPECT_EQ(count_op(fused.graph, "add_layernorm"), 2 * layers + 1);
  EXPECT_EQ(count_op(fused.graph, "layernorm_backward_add"), 2 * layers);
  int removed = model.graph.num_nodes() - fused.graph.num_nodes();
  EXPECT_GT(removed, 4 * layers + 1);  // casts of residual branches and of norm gradients go too
  RecordProperty("nodes_before", model.graph.num_nodes());
  RecordProperty("nodes_after", fused.graph.num_nodes());
  expect_same_step(model, fused, 1e-4);
}

TEST(GPT2Fusion, F64GraphsKeepTheirElementwiseOps) {
  // The cpu kernels compute in f32: f64 chains (finite-difference checks) stay unfused.
  ModelGraph model = build_model_graph(config(), 2, 5, /*training=*/true, DType::F64);
  EXPECT_EQ(count_fused_elementwise(fuse_elementwise(model.graph, kept(model)).graph), 0);
}

}  // namespace
}  // namespace strata
