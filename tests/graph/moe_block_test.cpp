// A sparse mixture-of-experts block written with the graph API as the MoE families build it
// (transformers' Qwen2MoeSparseMoeBlock: router linear, top-k, SwiGLU experts, weighted combine, a
// shared expert behind its sigmoid gate) with the load-balancing and z losses added to a
// cross-entropy: the block's output against the formula evaluated token by token (each token through
// its k experts, no permutation), its gradients against finite differences (f64 on ref, through every
// MoE op's gradient rule), and cpu in f32 against ref.
#include <gtest/gtest.h>

#include <cmath>

#include "backends/backends.h"
#include "core/rng.h"
#include "graph/autodiff.h"
#include "graph/executor.h"
#include "param_finite_differences.h"

namespace strata {
namespace {

constexpr int64_t kBatch = 2, kSeq = 5, kWidth = 6, kExperts = 4, kTopK = 2, kHidden = 5, kShared = 7;
constexpr int64_t kTokens = kBatch * kSeq;

struct MoeBlock {
  Graph graph;
  int x = -1, targets = -1, y = -1, loss = -1;
  std::vector<int> params;  // x first: its gradient is checked too
  Gradients grads;
};

MoeBlock build(DType dtype, double capacity_factor) {
  MoeBlock s;
  Graph& g = s.graph;
  auto param = [&](const std::string& name, const Shape& shape) {
    s.params.push_back(g.add_param(name, {shape, dtype}));
    return s.params.back();
  };
  const Attrs linear{{"trans_a", false}, {"trans_b", true}};  // nn.Linear's [out, in] weights
  const Attrs grouped{{"trans_b", true}};
  s.x = param("x", {kBatch, kSeq, kWidth});
  s.targets = g.add_input("targets", {{kBatch, kSeq}, DType::I32});
  const int logits = g.apply1("matmul", {s.x, param("gate", {kExperts, kWidth})}, linear, "router");
  const std::vector<int> route = g.apply("moe_route", {logits},
                                         {{"top_k", kTopK}, {"scoring", std::string("softmax")},
                                          {"norm_topk_prob", false}, {"capacity_factor", capacity_factor}},
                                         "route");
  const int xs = g.apply1("moe_permute", {s.x, route[2]});
  auto experts = [&](const std::string& name, int in, int64_t out, int64_t inner) {
    return g.apply1("grouped_matmul", {in, param(name, {kExperts, out, inner}), route[3]}, grouped, name);
  };
  const int act = g.apply1("swiglu", {experts("experts.gate_proj", xs, kHidden, kWidth),
                                      experts("experts.up_proj", xs, kHidden, kWidth)});
  const int down = experts("experts.down_proj", act, kWidth, kHidden);
  const int routed_out = g.apply1("moe_combine", {down, route[0], route[2]});
  auto dense = [&](const std::string& name, int in, int64_t out, int64_t inner) {
    return g.apply1("matmul", {in, param(name, {out, inner})}, linear, name);
  };
  const int shared_act = g.apply1("swiglu", {dense("shared.gate_proj", s.x, kShared, kWidth),
                                             dense("shared.up_proj", s.x, kShared, kWidth)});
  const int shared = g.apply1("sigmoid_gate", {dense("shared.down_proj", shared_act, kWidth, kShared),
                                               dense("shared_expert_gate", s.x, 1, kWidth)});
  s.y = g.apply1("add", {routed_out, shared});
  const std::vector<int> terms = g.apply("moe_router_loss_terms", {logits});
  const int aux = g.apply("moe_aux_loss", {terms[0], terms[1], route[4]},
                          {{"tokens", kTokens}, {"aux_coef", 0.05}, {"z_coef", 0.01}})[0];
  const int cross_entropy = g.apply("cross_entropy", {s.y, s.targets})[0];
  s.loss = g.apply1("add", {cross_entropy, aux});
  s.grads = add_backward(g, s.loss, s.params);
  return s;
}

std::vector<Tensor> random_params(const MoeBlock& s, DType dtype) {
  std::vector<Tensor> params;
  CounterRng rng(5);
  for (size_t i = 0; i < s.params.size(); ++i) {
    Tensor value = Tensor::empty(s.graph.value(s.params[i]).meta.shape, DType::F64);
    for (int64_t j = 0; j < value.numel(); ++j) value.data<double>()[j] = (i == 0 ? 1.0 : 0.6) * rng.normal(i, j);
    params.push_back(value.to(dtype));
  }
  return params;
}

// The output y, the loss, then each parameter's gradient, as f64.
std::vector<Tensor> run_step(const MoeBlock& s, const std::string& backend, const std::vector<Tensor>& params) {
  std::set<int> keep{s.loss, s.y};
  for (int param : s.params) keep.insert(s.grads.of.at(param));
  std::unique_ptr<Dispatcher> dispatcher = make_dispatcher(backend, FallbackPolicy::Error);
  CompiledGraph compiled(s.graph, *dispatcher, keep);
  for (size_t i = 0; i < params.size(); ++i) compiled.bind(s.params[i], params[i]);
  Tensor targets = Tensor::empty({kBatch, kSeq}, DType::I32);
  for (int64_t i = 0; i < kTokens; ++i) targets.data<int32_t>()[i] = static_cast<int32_t>((3 * i + 1) % kWidth);
  Tensor seed = Tensor::empty({}, DType::F64);
  seed.data<double>()[0] = 1.0;
  compiled.bind(s.targets, targets);
  compiled.bind(s.grads.seed, seed.to(s.graph.value(s.grads.seed).meta.dtype));
  compiled.run();
  std::vector<Tensor> results{compiled.tensor(s.y).to(DType::F64), compiled.tensor(s.loss).to(DType::F64)};
  for (int param : s.params) results.push_back(compiled.tensor(s.grads.of.at(param)).to(DType::F64));
  return results;
}

// row [out] = w [out, in] v [in]
std::vector<double> times(const Tensor& w, size_t offset, size_t out, size_t in, const std::vector<double>& v) {
  std::vector<double> row(out, 0.0);
  for (size_t o = 0; o < out; ++o) {
    for (size_t i = 0; i < in; ++i) row[o] += w.data<double>()[offset + o * in + i] * v[i];
  }
  return row;
}

std::vector<double> silu_times(const std::vector<double>& gate, const std::vector<double>& up) {
  std::vector<double> out(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) out[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
  return out;
}

// Token by token as MixtralSparseMoeBlock + Qwen2-MoE's shared expert compute it; `kept(t, j)` says
// whether token t's j-th choice survived the capacity.
std::vector<double> block_formula(const std::vector<Tensor>& p, const std::function<bool(size_t, size_t)>& kept) {
  const auto C = static_cast<size_t>(kWidth), E = static_cast<size_t>(kExperts), F = static_cast<size_t>(kHidden),
             S = static_cast<size_t>(kShared);
  std::vector<double> y;
  for (size_t t = 0; t < static_cast<size_t>(kTokens); ++t) {
    std::vector<double> x(p[0].data<double>() + t * C, p[0].data<double>() + (t + 1) * C);
    std::vector<double> logits = times(p[1], 0, E, C, x), probs(E);
    double max = *std::max_element(logits.begin(), logits.end()), sum = 0;
    for (size_t e = 0; e < E; ++e) sum += (probs[e] = std::exp(logits[e] - max));
    std::vector<size_t> order = {0, 1, 2, 3};
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return probs[a] > probs[b]; });
    std::vector<double> out(C, 0.0);
    for (size_t j = 0; j < static_cast<size_t>(kTopK); ++j) {
      const size_t e = order[j];
      if (!kept(t, j)) continue;
      std::vector<double> act = silu_times(times(p[2], e * F * C, F, C, x), times(p[3], e * F * C, F, C, x));
      std::vector<double> expert = times(p[4], e * C * F, C, F, act);
      for (size_t c = 0; c < C; ++c) out[c] += probs[e] / sum * expert[c];
    }
    std::vector<double> shared = times(p[7], 0, C, S, silu_times(times(p[5], 0, S, C, x), times(p[6], 0, S, C, x)));
    const double gate = 1 / (1 + std::exp(-times(p[8], 0, 1, C, x)[0]));
    for (size_t c = 0; c < C; ++c) y.push_back(out[c] + gate * shared[c]);
  }
  return y;
}

TEST(MoeBlock, OutputIsTheTokenByTokenFormula) {
  MoeBlock s = build(DType::F64, 0);
  std::vector<Tensor> params = random_params(s, DType::F64);
  Tensor y = run_step(s, "ref", params)[0];
  std::vector<double> expected = block_formula(params, [](size_t, size_t) { return true; });
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(y.data<double>()[i], expected[i], 1e-12) << i;
}

TEST(MoeBlock, CapacityLeavesTheDroppedChoicesOut) {
  MoeBlock s = build(DType::F64, 0.5);
  std::vector<Tensor> params = random_params(s, DType::F64);
  Tensor y = run_step(s, "ref", params)[0];
  // Which choices survive: each expert keeps its first ceil(0.5 * 20 / 4) = 3 assignments in token order.
  std::unique_ptr<Dispatcher> ref = make_dispatcher("ref", FallbackPolicy::Error);
  Tensor logits = ref->call("matmul", {params[0], params[1]}, {{"trans_a", false}, {"trans_b", true}})[0];
  Tensor rows = ref->call("moe_route", {logits},
                          {{"top_k", kTopK}, {"scoring", std::string("softmax")}, {"norm_topk_prob", false},
                           {"capacity_factor", 0.5}})[2];
  int dropped = 0;
  for (int64_t a = 0; a < rows.numel(); ++a) dropped += rows.data<int32_t>()[a] < 0;
  EXPECT_GT(dropped, 0) << "20 choices over 4 experts of 3 rows each drop some";
  std::vector<double> expected = block_formula(
      params, [&](size_t t, size_t j) { return rows.data<int32_t>()[t * kTopK + j] >= 0; });
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(y.data<double>()[i], expected[i], 1e-12) << i;
}

TEST(MoeBlock, GradientsMatchFiniteDifferences) {
  MoeBlock s = build(DType::F64, 0.5);
  std::vector<Tensor> params = random_params(s, DType::F64);
  std::vector<Tensor> step = run_step(s, "ref", params);
  std::vector<std::string> names;
  for (int param : s.params) names.push_back(s.graph.value(param).name);
  testing::expect_param_gradients(
      params, std::vector<Tensor>(step.begin() + 2, step.end()),
      [&](const std::vector<Tensor>& at) { return run_step(s, "ref", at)[1].item(); }, names, 11);
}

TEST(MoeBlock, CpuInF32MatchesRef) {
  for (double capacity : {0.0, 0.5}) {
    MoeBlock wide = build(DType::F64, capacity), narrow = build(DType::F32, capacity);
    std::vector<Tensor> params = random_params(wide, DType::F64), narrow_params;
    for (const Tensor& p : params) narrow_params.push_back(p.to(DType::F32));
    std::vector<Tensor> expected = run_step(wide, "ref", params), actual = run_step(narrow, "cpu", narrow_params);
    for (size_t i = 0; i < expected.size(); ++i) {
      for (int64_t j = 0; j < expected[i].numel(); ++j) {
        const double e = expected[i].data<double>()[j];
        EXPECT_NEAR(actual[i].data<double>()[j], e, 2e-5 * (1 + std::abs(e)))
            << "capacity " << capacity << " output " << i;
      }
    }
  }
}

}  // namespace
}  // namespace strata
