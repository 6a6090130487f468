// Layers over pipeline stages: by default the split that evens the stages' time (the head and loss make the last
// stage's layers dearer, so it takes fewer); with even_stage_layers as many on every stage as Megatron splits them
// (num_layers // pp), which no balanced split beats on the slowest stage, and refused where they do not divide.
#include <gtest/gtest.h>

#include <algorithm>

#include "planner/cost_model.h"
#include "planner/plan_dimension.h"
#include "planner_test_support.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

// 8 layers of width 256 and a vocabulary of 32768 on `devices` devices: the head weighs about a layer or two.
PlanningProblem problem(bool even, int devices = 4) {
  PlanningProblem p{"t", testing::gpt2_config(8, 4, 256, 32768, 128), 16, 128, DType::F32,
                    testing::test_cluster(1, devices, 64)};
  p.even_stage_layers = even;
  return p;
}

ParallelPlan pipeline(int stages) {
  ParallelPlan plan;
  plan.degrees.set("pp", stages);
  plan.degrees.set("dp", 4 / stages);
  plan.micro_batch = 1;
  plan.micro_batches = 16 / (4 / stages);
  set_pipeline_schedule(plan, PipelineSchedule::OneFOneB);
  return plan;
}

TEST(PlannerStageLayers, EvenSplitHoldsAsManyLayersOnEveryStage) {
  CostModel balanced_model(problem(false));
  CostModel even_model(problem(true));
  const Prediction balanced = balanced_model.evaluate(pipeline(4));
  const Prediction even = even_model.evaluate(pipeline(4));
  EXPECT_EQ(even.layers_per_stage, (std::vector<int>{2, 2, 2, 2}));
  // The balanced split relieves the last stage, which carries the head.
  EXPECT_LT(balanced.layers_per_stage.back(), 2);
  // Same work per layer either way; the balanced split is the one whose slowest stage is fastest.
  EXPECT_GT(even.step_s, balanced.step_s);
}

TEST(PlannerStageLayers, EvenSplitRefusesLayersThatDoNotDivide) {
  ParallelPlan three;  // 8 layers over 3 stages of 3 devices
  three.degrees.set("pp", 3);
  three.degrees.set("dp", 1);
  three.micro_batch = 1;
  three.micro_batches = 16;
  set_pipeline_schedule(three, PipelineSchedule::OneFOneB);
  CostModel even_model(problem(true, 3));
  const auto why = even_model.invalid_reason(three);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("do not split evenly"), std::string::npos) << *why;
  CostModel balanced_model(problem(false, 3));
  EXPECT_FALSE(balanced_model.invalid_reason(three).has_value());
}

}  // namespace
}  // namespace strata
