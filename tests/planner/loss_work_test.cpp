// The frameworks' losses (loss_work.h): torchtitan's (the logits cast to fp32, PyTorch's log_softmax and nll_loss op
// by op) and OLMo-core's two (cast, a shifted copy, then z-loss and cross-entropy op by op or in one Triton kernel),
// priced as their memory traffic beyond the fused cross-entropy kernel, over the logits a device holds.
#include "planner/loss_work.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "planner/cost_model.h"
#include "planner/model_spec.h"
#include "planner_test_support.h"

namespace strata {
namespace {

// The extra bytes per logit of `loss` with logits of `logit_bytes`, forward and backward.
void expect_extra(LossKernel loss, double logit_bytes, double forward, double backward) {
  const LossExtra extra = loss_extra(loss, logit_bytes);
  EXPECT_DOUBLE_EQ(extra.forward, forward) << "logits of " << logit_bytes << " bytes";
  EXPECT_DOUBLE_EQ(extra.backward, backward) << "logits of " << logit_bytes << " bytes";
}

TEST(PlannerLoss, EagerF32MovesTheCastAndTheFp32PassesBeyondTheFusedKernel) {
  // bf16 logits: forward float() 2 + 4, log_softmax 4 + 4, less the fused read 2; backward nll_loss's zeroed
  // gradient 4, log_softmax's 4 + 4 + 4, float()'s 4 + 2, less the fused read and write 2 + 2.
  expect_extra(LossKernel::EagerF32, 2, 12, 18);
  // fp32 logits are not copied by float().
  expect_extra(LossKernel::EagerF32, 4, 4, 8);
  expect_extra(LossKernel::Fused, 2, 0, 0);
  EXPECT_EQ(parse_loss_kernel("eager-f32", "--loss"), LossKernel::EagerF32);
  EXPECT_THROW(parse_loss_kernel("eager", "--loss"), Error);
}

TEST(PlannerLoss, OlmoCoreEagerLossAddsTheShiftedCopyAndZLossPasses) {
  // bf16 logits, counted kernel by kernel from PyTorch's ops:
  // forward  float() 2 + 4, contiguous() 4 + 4, log_softmax 4 + 4, amax 4, x - max 4 + 4, exp_ 4 + 4, sum 4 = 46,
  //          less the fused read 2 = 44;
  // backward x - lse 4 + 4, exp 4 + 4, grad * 4 + 4, nll_loss's zeros 4, log_softmax's 4 + 4 + 4, the two
  //          gradients summed 4 + 4 + 4, slice_backward's zeros 4 and copy 4 + 4, float()'s 4 + 2 = 70,
  //          less the fused read and write 2 + 2 = 66.
  expect_extra(LossKernel::EagerF32ZLoss, 2, 44, 66);
  EXPECT_EQ(parse_loss_kernel("eager-f32-zloss", "--loss"), LossKernel::EagerF32ZLoss);
}

TEST(PlannerLoss, OlmoCoreTritonLossAddsTheCastAndTheShiftedCopy) {
  // bf16 logits: forward float() 2 + 4, contiguous() 4 + 4, the Triton kernel's read 4 = 18, less 2 = 16;
  // backward the Triton kernel 4 + 4, slice_backward 4 + 4 + 4, float()'s 4 + 2 = 26, less 2 + 2 = 22.
  expect_extra(LossKernel::TritonF32, 2, 16, 22);
  // fp32 logits: no float() either way; forward 8 + 4 less 4, backward 8 + 12 less 8.
  expect_extra(LossKernel::TritonF32, 4, 8, 12);
  EXPECT_EQ(parse_loss_kernel("triton-f32", "--loss"), LossKernel::TritonF32);
}

TEST(PlannerLoss, MegatronLossCountsItsFp32PassesKernelByKernel) {
  // bf16 logits, Megatron's _VocabParallelCrossEntropy op by op (mpu/cross_entropy.py, Megatron-Core's
  // tensor_parallel/cross_entropy.py): forward float() 2 + 4, max 4, sub_ 4 + 4, exp_ 4 + 4, sum 4, div_ 4 + 4 = 38,
  // less the fused read 2 = 36; backward mul_ 4 + 4, float()'s backward 4 + 2 = 14, less 2 + 2 = 10.
  expect_extra(LossKernel::MegatronF32, 2, 36, 10);
  // fp32 logits: no float() either way; forward 32 less 4, backward 8 less 8.
  expect_extra(LossKernel::MegatronF32, 4, 28, 0);
  EXPECT_EQ(parse_loss_kernel("megatron-f32", "--loss"), LossKernel::MegatronF32);
}

TEST(PlannerLoss, MegatronFusedLossWritesWhatEachCompiledFunctionReturns) {
  // bf16 logits, fused_cross_entropy.py's four compiled functions: calculate_logits_max 2 + 4, calculate_predicted_
  // logits 4 + 4, calculate_cross_entropy_loss 4 + 4 = 22, less 2 = 20; calculate_gradients 4 read, 4 written back,
  // 2 written = 10, less 2 + 2 = 6.
  expect_extra(LossKernel::MegatronF32Fused, 2, 20, 6);
  // Fewer bytes than the op-by-op loss each way: the fusion's point.
  EXPECT_LT(loss_extra(LossKernel::MegatronF32Fused, 2).forward, loss_extra(LossKernel::MegatronF32, 2).forward);
  EXPECT_LT(loss_extra(LossKernel::MegatronF32Fused, 2).backward, loss_extra(LossKernel::MegatronF32, 2).backward);
  // fp32 logits: forward 4 + 8 + 8 less 4 = 16; backward 4 + 4 + 2, autograd's cast back 2 + 4, less 8 = 8.
  expect_extra(LossKernel::MegatronF32Fused, 4, 16, 8);
  EXPECT_EQ(parse_loss_kernel("megatron-f32-fused", "--loss"), LossKernel::MegatronF32Fused);
}

TEST(PlannerLoss, OverTheLogitsOfTheDevicesVocabularyShard) {
  ModelConfig config = model_preset("gpt2-small").config;  // vocabulary 50,257: a shard of 25,129 rows at tp = 2
  const Workload fused = build_workload(config, 2, 64, 2, DType::BF16);
  Workload eager = build_workload(config, 2, 64, 2, DType::BF16);
  add_loss_work(eager.head, LossKernel::EagerF32, config, 2, 64, 2, DType::BF16);
  const double logits = 2.0 * 64 * 25129;
  EXPECT_DOUBLE_EQ(testing::bytes_of(eager.head.forward) - testing::bytes_of(fused.head.forward), 12 * logits);
  EXPECT_DOUBLE_EQ(testing::bytes_of(eager.head.backward) - testing::bytes_of(fused.head.backward), 18 * logits);
  // A segment without the loss gets nothing.
  Workload layer_only = build_workload(config, 2, 64, 2, DType::BF16);
  add_loss_work(layer_only.layer, LossKernel::EagerF32, config, 2, 64, 2, DType::BF16);
  EXPECT_DOUBLE_EQ(testing::bytes_of(layer_only.layer.forward), testing::bytes_of(fused.layer.forward));
}

// Through the cost model on a 100 GB/s f32 device with no launch cost: the step's compute grows by the extra bytes
// (torchtitan's: 4 forward and 8 backward per logit) of every micro-batch at that bandwidth.
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
  // OLMo-core's eager loss on fp32 logits: forward copy 8, log_softmax 8, logsumexp 24, less 4 = 36; backward
  // logsumexp's 24, nll_loss's 4, log_softmax's 12, the sum 12, slice_backward's 12, less 8 = 56.
  EXPECT_NEAR(compute(LossKernel::EagerF32ZLoss) - compute(LossKernel::Fused),
              2 * logits_per_micro_batch * (36 + 56) / 100e9, 1e-9);
}

}  // namespace
}  // namespace strata
