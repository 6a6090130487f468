// The memory model against what Strata's graph memory planner allocates for
// real training graphs, and against closed forms for the parts it derives.
#include <gtest/gtest.h>

#include <cmath>

#include "graph/memory_plan.h"
#include "model/model_graph.h"
#include "planner/cost_model.h"
#include "planner_test_support.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

using testing::gpt2_config;

// What a single-process run holds: the arena of the training graph (gradients
// kept until the step accumulates them) and, outside it, fp32 parameters,
// gradient accumulators and the two AdamW moments.
double measured_arena(const ModelConfig& c, int64_t batch) {
  ModelGraph model = build_model_graph(c, batch, c.block_size, true);
  std::set<int> kept{model.loss};
  for (const auto& [param, grad] : model.grads.of) kept.insert(grad);
  return static_cast<double>(plan_memory(model.graph, kept).arena_bytes);
}

TEST(PlannerMemory, PeakMatchesTheGraphArenaWithinTenPercent) {
  const ModelConfig configs[] = {gpt2_config(2, 4, 128, 512, 64), gpt2_config(4, 4, 256, 4096, 128),
                                gpt2_config(6, 6, 384, 4096, 256), gpt2_config(12, 12, 768, 50257, 256)};
  for (const ModelConfig& c : configs) {
    for (int64_t batch : {1, 2, 4, 8}) {
      CostModel model(PlanningProblem{"t", c, batch, c.block_size, DType::F32, testing::test_cluster(1, 1, 64)});
      ParallelPlan plan;
      plan.micro_batch = batch;
      MemoryBreakdown predicted = model.evaluate(plan).memory;
      double arena = measured_arena(c, batch);
      double predicted_arena = std::max(predicted.activations, predicted.staging);
      EXPECT_NEAR(predicted_arena / arena, 1.0, 0.10) << "width " << c.n_embd << " batch " << batch;
      double params = static_cast<double>(c.num_parameters());
      double measured_peak = 16 * params + arena;
      EXPECT_NEAR(predicted.peak / measured_peak, 1.0, 0.10) << "width " << c.n_embd << " batch " << batch;
      EXPECT_DOUBLE_EQ(predicted.weights + predicted.gradients + predicted.optimizer, 16 * params);
    }
  }
}

TEST(PlannerMemory, SavedActivationsPerLayerFollowTheClosedForms) {
  // Per layer, in elements of s*b*h: the layer input, both norms' outputs and the attention
  // residual stay on the residual stream (4); q/k/v (3), the attention output (1), the MLP's
  // first projection (4) and GELU output (4) are split by tensor parallelism. Row statistics
  // (f32): two norms' mean and rstd (4 per row) and the attention log-sum-exp (heads/t per row).
  const int64_t b = 2, s = 64, h = 256, heads = 8;
  ModelConfig c = gpt2_config(2, heads, h, 1000, 64);
  const double sbh = b * s * h * 4.0, rows = b * s * 4.0;
  for (int tp : {1, 2, 4}) {
    Workload w = build_workload(c, b, s, tp, DType::F32);
    const auto& none = w.layer.saved[static_cast<size_t>(RecomputeMode::None)];
    EXPECT_DOUBLE_EQ(none.residual, 4 * sbh + 4 * rows) << "tp " << tp;
    EXPECT_DOUBLE_EQ(none.sharded, 12 * sbh / tp + heads / tp * rows) << "tp " << tp;
    // Selective: the attention core is redone from q/k/v, so neither its output nor its
    // log-sum-exp is kept; everything else is.
    const auto& selective = w.layer.saved[static_cast<size_t>(RecomputeMode::Selective)];
    EXPECT_DOUBLE_EQ(selective.residual, 4 * sbh + 4 * rows) << "tp " << tp;
    EXPECT_DOUBLE_EQ(selective.sharded, 11 * sbh / tp) << "tp " << tp;
    // Full: only the layer input.
    const auto& full = w.layer.saved[static_cast<size_t>(RecomputeMode::Full)];
    EXPECT_DOUBLE_EQ(full.residual, sbh);
    EXPECT_DOUBLE_EQ(full.sharded, 0);
    // Sequence parallelism splits the residual part too: 16 sbh / t in all.
    EXPECT_DOUBLE_EQ(none.total(tp), 16 * sbh / tp + (4 + heads) * rows / tp);
  }
}

TEST(PlannerMemory, ZeroStagesShardStateOverDataParallelism) {
  // bf16 weights (2 bytes), fp32 master weights (4), fp32 gradients (4) and AdamW moments (8).
  ModelConfig c = gpt2_config(4, 4, 256, 4096, 128);
  ClusterSpec cluster = testing::test_cluster(1, 4, 64);
  cluster.device.dtypes[DType::BF16] = cluster.device.dtypes.at(DType::F32);
  CostModel model(PlanningProblem{"t", c, 8, 128, DType::BF16, cluster});
  const double p = static_cast<double>(c.num_parameters()), d = 4;
  struct Expected {
    double weights, master, gradients, optimizer;
  };
  const Expected expected[] = {{2 * p, 4 * p, 4 * p, 8 * p},
                               {2 * p, 4 * p / d, 4 * p, 8 * p / d},
                               {2 * p, 4 * p / d, 4 * p / d, 8 * p / d},
                               {2 * p / d, 4 * p / d, 4 * p / d, 8 * p / d}};
  for (int zero = 0; zero <= 3; ++zero) {
    ParallelPlan plan;
    plan.degrees.set("dp", 4);
    plan.micro_batch = 2;
    plan.zero = zero;
    MemoryBreakdown m = model.evaluate(plan).memory;
    EXPECT_DOUBLE_EQ(m.weights, expected[zero].weights) << "zero " << zero;
    EXPECT_DOUBLE_EQ(m.master, expected[zero].master) << "zero " << zero;
    EXPECT_DOUBLE_EQ(m.gradients, expected[zero].gradients) << "zero " << zero;
    EXPECT_DOUBLE_EQ(m.optimizer, expected[zero].optimizer) << "zero " << zero;
  }
}

TEST(PlannerMemory, OneFOneBKeepsPipelineDepthMicroBatchesOnTheFirstStage) {
  ModelConfig c = gpt2_config(8, 4, 256, 4096, 128);
  CostModel model(PlanningProblem{"t", c, 16, 128, DType::F32, testing::test_cluster(1, 4, 64)});
  const Workload& w = model.workload(1, 1);
  ParallelPlan plan;
  plan.degrees.set("pp", 4);
  plan.degrees.set("dp", 1);
  plan.micro_batch = 1;
  plan.micro_batches = 16;
  set_pipeline_schedule(plan, PipelineSchedule::OneFOneB);
  Prediction one_f_one_b = model.evaluate(plan);
  set_pipeline_schedule(plan, PipelineSchedule::GPipe);
  Prediction gpipe = model.evaluate(plan);
  ASSERT_EQ(one_f_one_b.layers_per_stage, gpipe.layers_per_stage);
  // GPipe keeps all 16 micro-batches, 1F1B keeps 4 on the first stage: the difference is 12
  // micro-batches of the first stage's saved activations (its layers and the embedding).
  double saved = one_f_one_b.layers_per_stage[0] * w.layer.saved[0].total(1) + w.embedding.saved[0].total(1);
  EXPECT_NEAR(gpipe.stages[0].activations - one_f_one_b.stages[0].activations, 12 * saved, 1e-6 * saved);
  // The last stage holds one micro-batch in flight under 1F1B, so less than the first.
  const Workload& same = model.workload(1, 1);
  double last_saved = one_f_one_b.layers_per_stage[3] * same.layer.saved[0].total(1) + same.head.saved[0].total(1);
  EXPECT_NEAR(gpipe.stages[3].activations - one_f_one_b.stages[3].activations, 15 * last_saved, 1e-6 * last_saved);
}

}  // namespace
}  // namespace strata
