// A LLaMA-style stack written with the graph API: embedding; per layer
// x = x + o(rope(q(rms_norm(x)))) and x = x + down(swiglu(gate(h), up(h)))
// with h = rms_norm(x); a final rms_norm, the LM head and cross-entropy.
// Autodiff through rms_norm, rope and swiglu against finite differences (f64
// on ref), and the fusion pass: every residual add + rms_norm becomes
// add_rms_norm and every rms_norm_backward + gradient add becomes
// rms_norm_backward_add, as for GPT-2's LayerNorms, with the fused graph's
// loss and gradients those of the unfused one.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/backends.h"
#include "core/rng.h"
#include "graph/autocast.h"
#include "graph/autodiff.h"
#include "graph/executor.h"
#include "graph/fusion.h"
#include "param_finite_differences.h"

namespace strata {
namespace {

constexpr int64_t kVocab = 11, kWidth = 16, kHeadDim = 8, kHidden = 24, kLayers = 2, kBatch = 2, kSeq = 5;

struct LlamaStack {
  Graph graph;
  int tokens = -1, targets = -1, positions = -1, loss = -1;
  std::vector<int> params;
  std::vector<bool> is_norm;  // per param: a norm weight (initialised near 1)
  Gradients grads;
};

// Params and the residual stream in `dtype`; matmuls, rope and swiglu in `precision`'s low dtype.
LlamaStack build(DType dtype, const std::string& precision) {
  LlamaStack s;
  Graph& g = s.graph;
  Autocast ops(g, PrecisionPolicy::parse(precision, default_fp32_ops(), "precision"));
  auto param = [&](const std::string& name, const Shape& shape, bool norm) {
    s.params.push_back(g.add_param(name, {shape, dtype}));
    s.is_norm.push_back(norm);
    return s.params.back();
  };
  const Attrs plain{{"trans_a", false}, {"trans_b", false}};
  const Attrs eps{{"eps", 1e-5}};
  const Attrs rope{{"head_dim", kHeadDim}, {"theta", 1e4},           {"scaling", "none"},
                   {"factor", 1.0},        {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                   {"original_max_positions", int64_t{8192}},        {"inverse", false}};
  auto linear = [&](int x, const std::string& name, int64_t in, int64_t out) {
    return ops.apply1("matmul", {x, param(name, {in, out}, false)}, plain, name);
  };
  s.tokens = g.add_input("tokens", {{kBatch, kSeq}, DType::I32});
  s.targets = g.add_input("targets", {{kBatch, kSeq}, DType::I32});
  s.positions = g.add_input("positions", {{kSeq}, DType::I32});
  int x = ops.apply1("embedding", {param("embed", {kVocab, kWidth}, false), s.tokens});
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    const std::string p = "layers." + std::to_string(layer) + ".";
    int h = ops.apply1("rms_norm", {x, param(p + "input_norm", {kWidth}, true)}, eps, p + "input_norm");
    int q = ops.apply1("rope", {linear(h, p + "q", kWidth, kWidth), s.positions}, rope, p + "rope");
    x = ops.apply1("add", {x, linear(q, p + "o", kWidth, kWidth)}, {}, p + "attn.residual");
    h = ops.apply1("rms_norm", {x, param(p + "post_norm", {kWidth}, true)}, eps, p + "post_norm");
    int act = ops.apply1("swiglu", {linear(h, p + "gate", kWidth, kHidden), linear(h, p + "up", kWidth, kHidden)});
    x = ops.apply1("add", {x, linear(act, p + "down", kHidden, kWidth)}, {}, p + "mlp.residual");
  }
  int normed = ops.apply1("rms_norm", {x, param("norm", {kWidth}, true)}, eps, "norm");
  s.loss = ops.apply("cross_entropy", {linear(normed, "head", kWidth, kVocab), s.targets})[0];
  s.grads = add_backward(g, s.loss, s.params);
  return s;
}

std::vector<Tensor> random_params(const LlamaStack& s, DType dtype) {
  std::vector<Tensor> params;
  CounterRng rng(3);
  for (size_t i = 0; i < s.params.size(); ++i) {
    Tensor value = Tensor::empty(s.graph.value(s.params[i]).meta.shape, DType::F64);
    for (int64_t j = 0; j < value.numel(); ++j) {
      value.data<double>()[j] = s.is_norm[i] ? 1.0 + 0.2 * rng.normal(i, j) : 0.5 * rng.normal(i, j);
    }
    params.push_back(value.to(dtype));
  }
  return params;
}

Tensor ids(uint64_t stream) {
  Tensor tensor = Tensor::empty({kBatch, kSeq}, DType::I32);
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    tensor.data<int32_t>()[i] = static_cast<int32_t>((7 * i + static_cast<int64_t>(stream)) % kVocab);
  }
  return tensor;
}

Tensor positions() {
  Tensor tensor = Tensor::empty({kSeq}, DType::I32);
  // Positions of a continued sequence, as a KV-cache decoder passes them.
  for (int64_t t = 0; t < kSeq; ++t) tensor.data<int32_t>()[t] = static_cast<int32_t>(t + 40);
  return tensor;
}

// One step of `graph` (the stack's, or a rewrite of it with value map `map`): the loss, then
// each gradient, as f64.
std::vector<Tensor> run_step(const LlamaStack& s, const Graph& graph, const std::vector<int>& map,
                             const std::string& backend, const std::vector<Tensor>& params) {
  auto mapped = [&](int value) { return map.empty() ? value : map.at(static_cast<size_t>(value)); };
  std::set<int> keep{mapped(s.loss)};
  for (int param : s.params) keep.insert(mapped(s.grads.of.at(param)));
  std::unique_ptr<Dispatcher> dispatcher = make_dispatcher(backend, FallbackPolicy::Error);
  CompiledGraph compiled(graph, *dispatcher, keep);
  for (size_t i = 0; i < params.size(); ++i) compiled.bind(mapped(s.params[i]), params[i]);
  Tensor one = Tensor::empty({}, DType::F64);
  one.data<double>()[0] = 1.0;
  Tensor seed = one.to(s.graph.value(s.grads.seed).meta.dtype);
  Tensor tokens = ids(3), targets = ids(5), at = positions();
  compiled.bind(mapped(s.tokens), tokens);
  compiled.bind(mapped(s.targets), targets);
  compiled.bind(mapped(s.positions), at);
  compiled.bind(mapped(s.grads.seed), seed);
  compiled.run();
  std::vector<Tensor> results{compiled.tensor(mapped(s.loss)).to(DType::F64)};
  for (int param : s.params) results.push_back(compiled.tensor(mapped(s.grads.of.at(param))).to(DType::F64));
  return results;
}

int count_op(const Graph& graph, const std::string& op) {
  int count = 0;
  for (const Node& node : graph.nodes()) count += node.op == op ? 1 : 0;
  return count;
}

TEST(LlamaBlock, GradientsMatchFiniteDifferences) {
  LlamaStack s = build(DType::F64, "f32");
  std::vector<Tensor> params = random_params(s, DType::F64);
  std::vector<Tensor> step = run_step(s, s.graph, {}, "ref", params);
  std::vector<std::string> names;
  for (int param : s.params) names.push_back(s.graph.value(param).name);
  testing::expect_param_gradients(
      params, std::vector<Tensor>(step.begin() + 1, step.end()),
      [&](const std::vector<Tensor>& at) { return run_step(s, s.graph, {}, "ref", at)[0].item(); }, names, 9);
}

// Each element within tol * (|expected| + rms of the tensor).
void expect_close(const Tensor& actual, const Tensor& expected, double tol, const std::string& what) {
  double squares = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) squares += expected.data<double>()[i] * expected.data<double>()[i];
  double rms = std::sqrt(squares / static_cast<double>(std::max<int64_t>(1, expected.numel())));
  for (int64_t i = 0; i < expected.numel(); ++i) {
    double e = expected.data<double>()[i];
    ASSERT_LE(std::fabs(actual.data<double>()[i] - e), tol * (std::fabs(e) + rms)) << what << " element " << i;
  }
}

TEST(LlamaBlock, FusionFusesEveryResidualRmsNormAndGivesTheUnfusedResults) {
  struct Case {
    DType dtype;
    std::string precision, backend;
    double tol;  // the fused dx is rounded once where the unfused add rounds twice
  };
  const Case cases[] = {
      {DType::F64, "f32", "ref", 1e-12}, {DType::F32, "f32", "cpu", 1e-5}, {DType::F32, "bf16", "cpu", 1e-4}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " " + c.precision + " on " + c.backend);
    LlamaStack s = build(c.dtype, c.precision);
    std::set<int> keep{s.loss};
    for (int param : s.params) keep.insert(s.grads.of.at(param));
    GraphRewriter::Result fused = fuse_all(s.graph, keep);
    // Layer 0's input norm reads the embedding, every other norm a residual sum; every
    // norm's dx but the final norm's joins a residual gradient.
    EXPECT_EQ(count_op(fused.graph, "add_rms_norm"), 2 * kLayers);
    EXPECT_EQ(count_op(fused.graph, "rms_norm"), 1);
    EXPECT_EQ(count_op(fused.graph, "rms_norm_backward_add"), 2 * kLayers);
    EXPECT_EQ(count_op(fused.graph, "rms_norm_backward"), 1);
    EXPECT_EQ(count_op(fused.graph, "rope"), 2 * kLayers);  // forward and its inverse
    EXPECT_EQ(count_op(fused.graph, "swiglu_backward"), kLayers);
    // In bf16 each fused norm stores y in bf16 for its matmuls, absorbing the cast.
    int narrowed = 0;
    for (const Node& node : fused.graph.nodes()) {
      narrowed += node.op == "add_rms_norm" && fused.graph.value(node.outputs[1]).meta.dtype == DType::BF16;
    }
    EXPECT_EQ(narrowed, c.precision == "bf16" ? 2 * kLayers : 0);
    std::vector<Tensor> params = random_params(s, c.dtype);
    std::vector<Tensor> unfused_step = run_step(s, s.graph, {}, c.backend, params);
    std::vector<Tensor> fused_step = run_step(s, fused.graph, fused.value_map, c.backend, params);
    expect_close(fused_step[0], unfused_step[0], c.tol, "loss");
    for (size_t i = 1; i < fused_step.size(); ++i) {
      expect_close(fused_step[i], unfused_step[i], c.tol, s.graph.value(s.params[i - 1]).name + " gradient");
    }
  }
}

}  // namespace
}  // namespace strata
