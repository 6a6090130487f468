#include <gtest/gtest.h>

#include <cstring>

#include "backends/backends.h"
#include "gpt2_training_run.h"
#include "graph/executor.h"
#include "graph/memory_plan.h"
#include "graph/recompute.h"

namespace strata {
namespace {

size_t bytes_of(const Graph& g, int value) { return g.value(value).meta.nbytes(); }

// The schema lets `output` of its producer take over `input`.
bool permitted(const Graph& g, int output, int input) {
  const Node& node = g.node(g.value(output).producer);
  for (const auto& [out, in] : OpRegistry::global().get(node.op).may_reuse) {
    if (node.outputs[out] == output && node.inputs[in] == input) return true;
  }
  return false;
}

// Two values live at the same time share bytes only when one took the other
// over where the other died, as its producer's schema permits.
void expect_no_unsafe_sharing(const Graph& g, const MemoryPlan& plan) {
  for (int a = 0; a < g.num_values(); ++a) {
    if (g.value(a).kind != ValueKind::Intermediate) continue;
    ASSERT_GE(plan.offsets[a], 0);
    EXPECT_LE(plan.offsets[a] + static_cast<int64_t>(bytes_of(g, a)), static_cast<int64_t>(plan.arena_bytes));
    int taken = plan.takes_over[a];
    if (taken >= 0) {
      EXPECT_TRUE(permitted(g, a, taken)) << g.value(a).name;
      EXPECT_EQ(plan.lifetimes[taken].last, g.value(a).producer) << g.value(taken).name << " still read later";
      EXPECT_EQ(bytes_of(g, a), bytes_of(g, taken));
      EXPECT_EQ(plan.offsets[a], plan.offsets[taken]);
    }
    for (int b = a + 1; b < g.num_values(); ++b) {
      if (g.value(b).kind != ValueKind::Intermediate) continue;
      const Lifetime& la = plan.lifetimes[a];
      const Lifetime& lb = plan.lifetimes[b];
      bool live_together = la.first <= lb.last && lb.first <= la.last;
      int64_t a_end = plan.offsets[a] + static_cast<int64_t>(bytes_of(g, a));
      int64_t b_end = plan.offsets[b] + static_cast<int64_t>(bytes_of(g, b));
      bool share = plan.offsets[a] < b_end && plan.offsets[b] < a_end;
      if (live_together && share) {
        EXPECT_EQ(plan.takes_over[b], a) << g.value(a).name << " and " << g.value(b).name;
      }
    }
  }
}

TEST(InPlacePlan, GPT2TrainingGraphsShareOnlyByPermittedTakeovers) {
  ModelGraph model = training_run::three_layer_training_graph();
  for (RecomputeMode mode : {RecomputeMode::None, RecomputeMode::Selective, RecomputeMode::Full}) {
    GraphRewriter::Result result = recompute_activations(model.graph, training_run::first_backward_node(model), mode,
                                                         segment_by_label_prefix("transformer.h."));
    std::set<int> kept;
    for (int value : training_run::kept_values(model)) kept.insert(result(value));
    MemoryPlan plan = plan_memory(result.graph, kept);
    expect_no_unsafe_sharing(result.graph, plan);
    MemoryPlan separate = plan_memory(result.graph, kept, {.in_place = false});
    EXPECT_LE(plan.arena_bytes, separate.arena_bytes) << recompute_mode_name(mode);
    // Without recomputation the peak holds the logits and their gradient.
    if (mode == RecomputeMode::None) {
      EXPECT_LT(plan.arena_bytes, separate.arena_bytes);
    }
    // The largest activation, the logits, becomes their own gradient.
    int logits = result(model.logits);
    int dlogits = -1;
    for (const Node& node : result.graph.nodes()) {
      if (node.op == "cross_entropy_backward") dlogits = node.outputs[0];
    }
    ASSERT_GE(dlogits, 0);
    EXPECT_EQ(plan.takes_over[dlogits], logits);
  }
}

TEST(InPlacePlan, AChainOfElementwiseOpsRunsInOneBuffer) {
  Graph g;
  int x = g.add_input("x", {{4, 4}, DType::F32});
  int bias = g.add_param("bias", {{4}, DType::F32});
  int a = g.apply1("scale", {x}, {{"factor", 2.0}});
  int b = g.apply1("gelu", {a});
  int c = g.apply1("scale", {b}, {{"factor", 0.5}});
  int d = g.apply1("add", {c, bias});
  MemoryPlan plan = plan_memory(g, {d});
  expect_no_unsafe_sharing(g, plan);
  EXPECT_EQ(plan.takes_over[a], -1);  // x is bound from outside: never taken
  EXPECT_EQ(plan.takes_over[b], a);
  EXPECT_EQ(plan.takes_over[c], b);
  EXPECT_EQ(plan.takes_over[d], c);
  EXPECT_EQ(plan.arena_bytes, 64u);
  EXPECT_EQ(plan_memory(g, {d}, {.in_place = false}).arena_bytes, 128u);  // neighbours overlap at one node
}

TEST(InPlacePlan, ValuesStillNeededAreNotTaken) {
  Graph g;
  int x = g.add_input("x", {{4, 4}, DType::F32});
  int a = g.apply1("scale", {x}, {{"factor", 2.0}});
  int b = g.apply1("gelu", {a});
  int c = g.apply1("add", {b, a});  // a is read here, after gelu
  int small = g.apply1("scale", {g.add_input("row", {{4}, DType::F32})}, {{"factor", 3.0}});
  int broadcast = g.apply1("add", {x, small});  // small dies here but is smaller than the output
  int twice = g.apply1("add", {c, c});          // c read twice by one node
  int kept = g.apply1("scale", {broadcast}, {{"factor", 1.0}});
  int after_kept = g.apply1("gelu", {kept});
  MemoryPlan plan = plan_memory(g, {twice, kept, after_kept});
  expect_no_unsafe_sharing(g, plan);
  EXPECT_EQ(plan.takes_over[b], -1);
  EXPECT_EQ(plan.takes_over[c], b);  // b and a both die at c: the first permitted input wins
  EXPECT_EQ(plan.takes_over[broadcast], -1);
  EXPECT_EQ(plan.takes_over[twice], -1);
  EXPECT_EQ(plan.takes_over[kept], broadcast);
  EXPECT_EQ(plan.takes_over[after_kept], -1);
}

std::vector<std::byte> raw_bytes(const Tensor& tensor) {
  std::vector<std::byte> bytes(tensor.nbytes());
  std::memcpy(bytes.data(), tensor.raw(), bytes.size());
  return bytes;
}

TEST(InPlacePlan, ResultsMatchRunsWithoutPlanning) {
  Graph g;
  const int64_t n = 40000;  // several of the cpu kernels' parallel chunks
  int x = g.add_input("x", {{n}, DType::F32});
  int a = g.apply1("scale", {x}, {{"factor", 1.5}});
  int b = g.apply1("gelu", {a});
  int c = g.apply1("gelu_backward", {b, a});
  int d = g.apply1("add", {g.apply1("scale", {x}, {{"factor", -1.0}}), c});
  Tensor input = Tensor::empty({n}, DType::F32);
  for (int64_t i = 0; i < n; ++i) input.data<float>()[i] = static_cast<float>((i * 37) % 1001) / 250.0f - 2.0f;
  for (const std::string backend : {"cpu", "ref"}) {
    auto dispatcher = make_dispatcher(backend, FallbackPolicy::Allow);
    CompiledGraph compiled(g, *dispatcher, {d});
    EXPECT_GE(compiled.memory_plan().takes_over[c], 0);
    EXPECT_GE(compiled.memory_plan().takes_over[d], 0);
    compiled.bind(x, input);
    compiled.run();
    Tensor va = dispatcher->call("scale", {input}, {{"factor", 1.5}})[0];
    Tensor vb = dispatcher->call("gelu", {va})[0];
    Tensor vc = dispatcher->call("gelu_backward", {vb, va})[0];
    Tensor vd = dispatcher->call("add", {dispatcher->call("scale", {input}, {{"factor", -1.0}})[0], vc})[0];
    EXPECT_EQ(raw_bytes(compiled.tensor(d)), raw_bytes(vd)) << backend;
  }
}

TEST(InPlacePlan, GPT2StepMatchesARunWithoutPlanning) {
  ModelGraph model = training_run::three_layer_training_graph();
  GraphRewriter::Result identity = recompute_activations(model.graph, training_run::first_backward_node(model),
                                                         RecomputeMode::None, segment_by_label_prefix(""));
  for (const std::string backend : {"cpu", "ref"}) {
    training_run::StepBytes planned = training_run::run_compiled(model, identity.graph, identity, backend);
    training_run::StepBytes unplanned = training_run::run_unplanned(model, backend);
    EXPECT_EQ(planned.loss, unplanned.loss) << backend;
    for (size_t i = 0; i < model.params.size(); ++i) {
      EXPECT_EQ(planned.grads[i], unplanned.grads[i]) << backend << " " << model.graph.value(model.params[i]).name;
    }
  }
}

}  // namespace
}  // namespace strata
