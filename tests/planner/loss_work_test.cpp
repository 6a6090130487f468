// torchtitan's loss (loss_work.h): the logits cast to fp32 and PyTorch's log_softmax and nll_loss run op by op,
// priced as their memory traffic beyond the fused cross-entropy kernel, over the logits a device holds.
#include "planner/loss_work.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "planner/cost_model.h"
#include "planner/model_spec.h"
#include "planner_test_support.h"

namespace strata {
namespace {

TEST(PlannerLoss, EagerF32MovesTheCastAndTheFp32PassesBeyondTheFusedKernel) {
  // bf16 logits: forward float() 2 + 4, log_softmax 4 + 4, less the fused read 2; backward nll_loss's zeroed
  // gradient 4, log_softmax's 4 + 4 + 4, float()'s 4 + 2, less the fused read and write 2 + 2.
  const LossExtra bf16 = eager_f32_loss_extra(2);
  EXPECT_DOUBLE_EQ(bf16.forward, 12);
  EXPECT_DOUBLE_EQ(bf16.backward, 18);
  // fp32 logits are not copied by float().
  const LossExtra f32 = eager_f32_loss_extra(4);
  EXPECT_DOUBLE_EQ(f32.forward, 4);
  EXPECT_DOUBLE_EQ(f32.backward, 8);
  EXPECT_EQ(parse_loss_kernel("eager-f32", "--loss"), LossKernel::EagerF32);
  EXPECT_THROW(parse_loss_kernel("eager", "--loss"), Error);
}

TEST(PlannerLoss, OverTheLogitsOfTheDevicesVocabularyShard) {
  ModelConfig config = model_preset("gpt2-small").config;  // vocabulary 50,257: a shard of 25,129 rows at tp = 2
  const Workload fused = build_workload(config, 2, 64, 2, DType::BF16);
  Workload eager = build_workload(config, 2, 64, 2, DType::BF16);
  add_eager_f32_loss(eager.head, config, 2, 64, 2, DType::BF16);
  const double logits = 2.0 * 64 * 25129;
  EXPECT_DOUBLE_EQ(testing::bytes_of(eager.head.forward) - testing::bytes_of(fused.head.forward), 12 * logits);
  EXPECT_DOUBLE_EQ(testing::bytes_of(eager.head.backward) - testing::bytes_of(fused.head.backward), 18 * logits);
  // A segment without the loss gets nothing.
  Workload layer_only = build_workload(config, 2, 64, 2, DType::BF16);
  add_eager_f32_loss(layer_only.layer, config, 2, 64, 2, DType::BF16);
  EXPECT_DOUBLE_EQ(testing::bytes_of(layer_only.layer.forward), testing::bytes_of(fused.layer.forward));
}

// Through the cost model on a 100 GB/s f32 device with no launch cost: the step's compute grows by the extra bytes
// (4 forward and 8 backward per logit) of every micro-batch at that bandwidth.
TEST(PlannerLoss, CostModelPricesTheExtraTrafficAtTheDevicesBandwidth) {
  const ModelConfig config = model_preset("gpt2-small").config;
  auto compute = [&](LossKernel loss) {
    PlanningProblem problem{"gpt2-small", config, 4, 128, DType::F32, testing::test_cluster(1, 1, 1000)};
    problem.loss = loss;
    CostModel model(problem);
    ParallelPlan plan;
    plan.micro_batch = 2;
    plan.micro_batches = 2;
    return model.evaluate(plan).time.compute;
  };
  const double logits_per_micro_batch = 2.0 * 128 * 50257;
  EXPECT_NEAR(compute(LossKernel::EagerF32) - compute(LossKernel::Fused),
              2 * logits_per_micro_batch * (4 + 8) / 100e9, 1e-9);
}

}  // namespace
}  // namespace strata
