// The embedding's gradient added into the optimizer's fp32 gradient buffer every micro-batch (embedding_grad_work.h),
// against apex's grad_out.add_(grad_in) counted by hand for each element of the embedding a rank holds:
//   the gradient read (a bytes: 2 in bf16, 4 in fp32), the fp32 bucket read (4) and written (4).
#include "planner/embedding_grad_work.h"

#include <gtest/gtest.h>

#include "planner/cost_model.h"
#include "planner/model_spec.h"
#include "planner_test_support.h"
#include "support/gpt2_shapes.h"

namespace strata {
namespace {

TEST(PlannerEmbeddingGradAdd, BytesPerElementAsTheAddCountedByHand) {
  EXPECT_DOUBLE_EQ(embedding_grad_add_bytes(DType::BF16), 2 + 4 + 4);
  EXPECT_DOUBLE_EQ(embedding_grad_add_bytes(DType::F32), 4 + 4 + 4);
}

// The small Llama's table is 4099 x 32; under tp 2 the busiest rank holds 2050 of the rows (Megatron's vocabulary
// split, the larger share where the halves differ by a row). One op, in backward only, of no FLOPs.
TEST(PlannerEmbeddingGradAdd, AddsOneMemoryBoundPassOverTheRanksTable) {
  const ModelConfig config = testing::small_llama_config();
  for (auto [tp, rows] : {std::pair{1, 4099.0}, std::pair{2, 2050.0}}) {
    Workload work = build_workload(config, 2, 16, tp, DType::BF16);
    const size_t forward_ops = work.embedding.forward.size(), backward_ops = work.embedding.backward.size();
    add_embedding_grad_add(work.embedding, DType::BF16);
    EXPECT_EQ(work.embedding.forward.size(), forward_ops);
    ASSERT_EQ(work.embedding.backward.size(), backward_ops + 1);
    const OpWork& add = testing::op_labelled(work.embedding.backward, "embedding.grad_add");
    EXPECT_DOUBLE_EQ(add.bytes, rows * 32 * 10) << "tp " << tp;
    EXPECT_EQ(add.flops, 0);
    EXPECT_FALSE(add.residual_stream);
  }
}

// GPT-2's learned positions (16 x 64) are an embedding too (NeMo marks the position embeddings alike).
TEST(PlannerEmbeddingGradAdd, CountsTheLearnedPositions) {
  const ModelConfig config = testing::gpt2_config(2, 4, 64, 100, 16);
  Workload work = build_workload(config, 2, 16, 1, DType::BF16);
  add_embedding_grad_add(work.embedding, DType::BF16);
  EXPECT_DOUBLE_EQ(testing::op_labelled(work.embedding.backward, "embedding.grad_add").bytes, (100 + 16) * 64 * 10);
}

// Through the cost model: on a device of 100 GB/s at full efficiency and no launch cost, f32 (12 bytes an element),
// 4 micro-batches add 4 x 4099 x 32 x 12 bytes to the step's compute with fused accumulation; with separate
// accumulation every gradient's pass is already priced, so the flag adds nothing.
TEST(PlannerEmbeddingGradAdd, CostModelPricesItPerMicroBatchOnlyWithFusedAccumulation) {
  const ModelConfig config = testing::small_llama_config();
  auto compute = [&](bool add, bool fused) {
    PlanningProblem problem{"llama", config, 4, 16, DType::F32, testing::test_cluster(1, 1, 16)};
    problem.embedding_grad_add = add;
    problem.fused_accumulation = fused;
    CostModel model(problem);
    ParallelPlan plan;
    plan.micro_batch = 1;
    plan.micro_batches = 4;
    return model.evaluate(plan).time.compute;
  };
  EXPECT_NEAR(compute(true, true) - compute(false, true), 4.0 * 4099 * 32 * 12 / 100e9, 1e-12);
  EXPECT_DOUBLE_EQ(compute(true, false), compute(false, false));
}

}  // namespace
}  // namespace strata
