// Where clipping scales the gradients: inside AdamW (Strata's trainer) costs nothing of its own; a pass of its own
// (PyTorch's clip_grad_norm_, Megatron) reads and writes every gradient once more.
#include <gtest/gtest.h>

#include "planner/cost_model.h"
#include "planner/model_spec.h"
#include "planner_test_support.h"

namespace strata {
namespace {

double optimizer_seconds(bool separate_clip) {
  PlanningProblem problem{"gpt2-small", model_preset("gpt2-small").config, 8, 1024, DType::F32,
                          testing::test_cluster(1, 1, 1000)};
  problem.separate_clip = separate_clip;
  CostModel model(problem);
  ParallelPlan plan;
  plan.micro_batch = 8;
  plan.micro_batches = 1;
  return model.evaluate(plan).time.optimizer;
}

TEST(PlannerClipPass, ASeparatePassCostsEachGradientsBytesAtTheDevicesBandwidth) {
  // GPT-2 small's 124,439,808 f32 gradients, each read and written (8 bytes), at 100 GB/s with no launch cost:
  // the scaling is bandwidth-bound (1 flop per element against 1 TFLOP/s of vector units).
  const double parameters = 124439808, bandwidth = 100e9;
  EXPECT_NEAR(optimizer_seconds(true) - optimizer_seconds(false), parameters * 8 / bandwidth, 1e-9);
  EXPECT_GT(optimizer_seconds(false), 0.0);  // AdamW and the sum of squares remain
}

}  // namespace
}  // namespace strata
