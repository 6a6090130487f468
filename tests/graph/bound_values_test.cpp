// Values bound to tensors owned elsewhere. A kept value (how the trainer has gradients written straight into
// their buckets), or one no node reads: its node writes there and later readers read it there; unbound, the
// arena holds it again. A
// supplied value (a parameter's low-precision copy standing for the graph's cast of it): its node is skipped.
#include <gtest/gtest.h>

#include "backends/backends.h"
#include "graph/executor.h"
#include "support/error_text.h"

namespace strata {
namespace {

struct Chain {
  Graph graph;
  int x = -1, doubled = -1, kept = -1, after = -1;
};

// x -> doubled = 2x -> kept = 4x (kept) -> after = kept + doubled = 6x (kept), so a later node reads the bound value.
Chain chain() {
  Chain c;
  c.x = c.graph.add_input("x", {{3}, DType::F32});
  c.doubled = c.graph.apply1("scale", {c.x}, {{"factor", 2.0}});
  c.kept = c.graph.apply1("scale", {c.doubled}, {{"factor", 2.0}});
  c.after = c.graph.apply1("add", {c.kept, c.doubled});
  return c;
}

Tensor one_two_three() {
  Tensor x = Tensor::empty({3}, DType::F32);
  for (int i = 0; i < 3; ++i) x.data<float>()[i] = static_cast<float>(i + 1);
  return x;
}

TEST(BoundValues, TheNodeWritesIntoTheBoundTensorAndUnbindingReturnsItToTheArena) {
  Chain c = chain();
  auto dispatcher = make_dispatcher("cpu", FallbackPolicy::Error);
  CompiledGraph graph(c.graph, *dispatcher, {c.kept, c.after});
  Tensor x = one_two_three();
  graph.bind(c.x, x);
  Tensor outside = Tensor::zeros({3}, DType::F32);
  graph.bind(0, c.kept, outside);
  graph.run();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(outside.data<float>()[i], 4.0f * static_cast<float>(i + 1));
    EXPECT_EQ(graph.tensor(c.after).data<float>()[i], 6.0f * static_cast<float>(i + 1));
  }
  EXPECT_EQ(graph.tensor(c.kept).raw(), outside.raw());

  graph.unbind(0, c.kept);
  x.data<float>()[0] = 10.0f;
  graph.run();
  EXPECT_EQ(outside.data<float>()[0], 4.0f) << "an unbound value is no longer written outside";
  EXPECT_NE(graph.tensor(c.kept).raw(), outside.raw());
  EXPECT_EQ(graph.tensor(c.kept).data<float>()[0], 40.0f);
  EXPECT_EQ(graph.tensor(c.after).data<float>()[0], 60.0f);
}

TEST(BoundValues, ASuppliedValueSkipsItsNodeUntilWithdrawn) {
  Chain c = chain();
  auto dispatcher = make_dispatcher("cpu", FallbackPolicy::Error);
  CompiledGraph graph(c.graph, *dispatcher, {c.kept, c.after});
  Tensor x = one_two_three();
  graph.bind(c.x, x);
  // Supplied with values its node would not make: later nodes read them, so the node did not run.
  Tensor supplied = Tensor::empty({3}, DType::F32);
  for (int i = 0; i < 3; ++i) supplied.data<float>()[i] = 100.0f * static_cast<float>(i + 1);
  graph.supply(c.doubled, supplied);
  graph.run();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(supplied.data<float>()[i], 100.0f * static_cast<float>(i + 1)) << "the node wrote the supplied tensor";
    EXPECT_EQ(graph.tensor(c.kept).data<float>()[i], 200.0f * static_cast<float>(i + 1));
    EXPECT_EQ(graph.tensor(c.after).data<float>()[i], 300.0f * static_cast<float>(i + 1));
  }
  graph.withdraw(c.doubled);
  graph.run();
  EXPECT_EQ(graph.tensor(c.after).data<float>()[0], 6.0f);
  // Only the one output of a node reading bound values alone may be supplied.
  EXPECT_NE(testing::error_of([&] { graph.supply(c.kept, supplied); }).find("reading params and inputs only"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { graph.withdraw(c.doubled); }).find("is not supplied"), std::string::npos);
}

TEST(BoundValues, OnlyKeptValuesMayBeBound) {
  Chain c = chain();
  auto dispatcher = make_dispatcher("cpu", FallbackPolicy::Error);
  CompiledGraph graph(c.graph, *dispatcher, {c.kept, c.after});
  // `doubled` dies once `after` has read it: its bytes may be another value's, so it stays in the arena.
  EXPECT_NE(testing::error_of([&] { graph.bind(0, c.doubled, Tensor::zeros({3}, DType::F32)); })
                .find("cannot bind intermediate value"),
            std::string::npos);
  EXPECT_NE(testing::error_of([&] { graph.unbind(0, c.x); }).find("no bytes in the arena"), std::string::npos);
}

TEST(BoundValues, AValueNoNodeReadsMayBeBoundThoughNotKept) {
  // As the LM head's copy's gradient: made last for its bytes, read by nothing, collected at once.
  Graph g;
  const int x = g.add_input("x", {{3}, DType::F32});
  const int unread = g.apply1("scale", {x}, {{"factor", 3.0}});
  const int kept = g.apply1("scale", {x}, {{"factor", 2.0}});
  auto dispatcher = make_dispatcher("cpu", FallbackPolicy::Error);
  CompiledGraph graph(g, *dispatcher, {kept});
  Tensor input = one_two_three();
  graph.bind(x, input);
  Tensor outside = Tensor::zeros({3}, DType::F32);
  graph.bind(0, unread, outside);
  graph.run();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(outside.data<float>()[i], 3.0f * static_cast<float>(i + 1));
    EXPECT_EQ(graph.tensor(kept).data<float>()[i], 2.0f * static_cast<float>(i + 1));
  }
}

}  // namespace
}  // namespace strata
