// The tensor-parallel pass places each op by its schema's placement rule
// (ops/placement_rule.h), in one process on a small graph: x through a
// column-parallel projection (split by features) and a row-parallel one (whole
// again, or split along the sequence under sequence parallelism), then the op
// under test. Ops whose rule places what they read follow the split; the others
// are refused, naming the node, the op and the parallel.* key of the split.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "parallel/tensor_parallel.h"
#include "support/error_text.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::error_of;

const ShardingPlan kPlan{{
    {"up.weight", ShardStyle::ColumnParallel, 1, WeightLayout::OutIn},
    {"down.weight", ShardStyle::RowParallel, 1, WeightLayout::OutIn},
}};

// x [2, 4, 8] -> up [2, 4, 16], split by features -> down [2, 4, 8], whole or split along the sequence.
struct Projections {
  Graph graph;
  int up = -1;
  int down = -1;
  Projections() {
    const Attrs x_w_transposed{{"trans_a", false}, {"trans_b", true}};
    const int x = graph.add_input("x", {{2, 4, 8}, DType::F32});
    up = graph.apply1("matmul", {x, graph.add_param("up.weight", {{16, 8}, DType::F32})}, x_w_transposed, "up");
    down = graph.apply1("matmul", {up, graph.add_param("down.weight", {{8, 16}, DType::F32})}, x_w_transposed, "down");
  }
};

TensorParallelForward parallelize(const Graph& graph, bool sequence_parallel) {
  return parallelize_tensors(graph, kPlan, {.degree = 2, .rank = 0, .sequence_parallel = sequence_parallel});
}

const ValueLayout& layout_of(const TensorParallelForward& part, const std::string& value) {
  return part.layouts.at(part.rewritten.graph.find_value(value));
}

TEST(TensorParallelPlacement, AnElementwiseOpFollowsItsInputsSplit) {
  Projections features;
  features.graph.apply1("gelu", {features.up}, {}, "act");
  const ValueLayout& by_features = layout_of(parallelize(features.graph, false), "act:y");
  EXPECT_EQ(by_features.kind, ValueLayout::Kind::Split);
  EXPECT_EQ(by_features.dim, 2);

  Projections sequence;
  sequence.graph.apply1("gelu", {sequence.down}, {}, "act");
  const ValueLayout& by_positions = layout_of(parallelize(sequence.graph, true), "act:y");
  EXPECT_EQ(by_positions.kind, ValueLayout::Kind::Split);
  EXPECT_EQ(by_positions.dim, 1);
}

TEST(TensorParallelPlacement, AnOpWithoutARuleIsRefusedNamingTheOpAndTheTensorSplit) {
  Projections features;
  features.graph.apply1("sum_squares", {features.up}, {}, "norm");
  const std::string message = error_of([&] { parallelize(features.graph, false); });
  EXPECT_THAT(message, HasSubstr("tensor parallelism (parallel.tp = 2): node 'norm' (op 'sum_squares')"));
  EXPECT_THAT(message, HasSubstr("reads a split value, and its op has no placement rule"));
}

TEST(TensorParallelPlacement, AnOpWithoutARuleIsRefusedNamingTheSequenceSplit) {
  Projections sequence;
  sequence.graph.apply1("sum_squares", {sequence.down}, {}, "norm");
  const std::string message = error_of([&] { parallelize(sequence.graph, true); });
  EXPECT_THAT(message, HasSubstr("node 'norm' (op 'sum_squares')"));
  EXPECT_THAT(message,
              HasSubstr("reads a value split along the sequence (parallel.sp), and its op has no placement rule"));
}

// A row-wise norm runs on a block of positions, but not on a block of the features it normalises.
TEST(TensorParallelPlacement, ARowwiseNormRefusesASplitOfItsFeatures) {
  Projections features;
  const int gamma = features.graph.add_param("ln.weight", {{16}, DType::F32});
  const int beta = features.graph.add_param("ln.bias", {{16}, DType::F32});
  features.graph.apply("layernorm", {features.up, gamma, beta}, {{"eps", 1e-5}}, "ln");
  const std::string message = error_of([&] { parallelize(features.graph, false); });
  EXPECT_THAT(message, HasSubstr("node 'ln' (op 'layernorm') reads a split value in a way its op's placement rule "
                                 "(row-wise norm) does not place"));

  Projections sequence;
  const int sequence_gamma = sequence.graph.add_param("ln.weight", {{8}, DType::F32});
  const int sequence_beta = sequence.graph.add_param("ln.bias", {{8}, DType::F32});
  sequence.graph.apply("layernorm", {sequence.down, sequence_gamma, sequence_beta}, {{"eps", 1e-5}}, "ln");
  EXPECT_EQ(layout_of(parallelize(sequence.graph, true), "ln:y").dim, 1);
}

}  // namespace
}  // namespace strata
