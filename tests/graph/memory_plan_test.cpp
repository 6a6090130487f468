#include "graph/memory_plan.h"

#include <gtest/gtest.h>

#include "model/model_graph.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

ModelConfig tiny_config() { return testing::gpt2_config(2, 2, 16, 37, 8); }

TEST(MemoryPlan, ValuesLiveAtTheSameTimeNeverShareBytes) {
  ModelGraph model = build_model_graph(tiny_config(), 2, 8, /*training=*/true);
  std::set<int> kept{model.loss};
  for (const auto& [param, grad] : model.grads.of) kept.insert(grad);
  MemoryPlan plan = plan_memory(model.graph, kept, {.in_place = false});
  const Graph& g = model.graph;
  for (int a = 0; a < g.num_values(); ++a) {
    if (g.value(a).kind != ValueKind::Intermediate) {
      EXPECT_EQ(plan.offsets[a], -1);
      continue;
    }
    ASSERT_GE(plan.offsets[a], 0);
    EXPECT_EQ(plan.offsets[a] % 64, 0) << g.value(a).name;
    EXPECT_LE(plan.offsets[a] + static_cast<int64_t>(g.value(a).meta.nbytes()), static_cast<int64_t>(plan.arena_bytes));
    for (int b = a + 1; b < g.num_values(); ++b) {
      if (g.value(b).kind != ValueKind::Intermediate) continue;
      const Lifetime& la = plan.lifetimes[a];
      const Lifetime& lb = plan.lifetimes[b];
      bool live_together = la.first <= lb.last && lb.first <= la.last;
      int64_t a_end = plan.offsets[a] + static_cast<int64_t>(g.value(a).meta.nbytes());
      int64_t b_end = plan.offsets[b] + static_cast<int64_t>(g.value(b).meta.nbytes());
      bool share = plan.offsets[a] < b_end && plan.offsets[b] < a_end;
      EXPECT_FALSE(live_together && share) << g.value(a).name << " and " << g.value(b).name;
    }
  }
  EXPECT_LT(plan.arena_bytes, plan.unshared_bytes);
}

TEST(MemoryPlan, KeptValuesLiveToTheEnd) {
  ModelGraph model = build_model_graph(tiny_config(), 1, 8, /*training=*/false);
  MemoryPlan plan = plan_memory(model.graph, {model.logits});
  EXPECT_EQ(plan.lifetimes[model.logits].last, model.graph.num_nodes());
}

TEST(MemoryPlan, LifetimeSpansProducerToLastReader) {
  Graph g;
  int x = g.add_input("x", {{4}, DType::F32});
  int a = g.apply1("scale", {x}, {{"factor", 2.0}});
  int b = g.apply1("scale", {a}, {{"factor", 2.0}});
  int c = g.apply1("add", {b, a});
  MemoryPlan plan = plan_memory(g, {c}, {.in_place = false});
  EXPECT_EQ(plan.lifetimes[a].first, 0);
  EXPECT_EQ(plan.lifetimes[a].last, 2);
  EXPECT_EQ(plan.lifetimes[b].first, 1);
  EXPECT_EQ(plan.lifetimes[c].last, 3);
  // a, b and c overlap in time pairwise except none; all three must be disjoint
  EXPECT_EQ(plan.arena_bytes, 3u * 64u);
}

}  // namespace
}  // namespace strata
