// Which of a layer's forward collectives selective recomputation runs again (selective_comm.h):
// torchtitan's per-op policy saves reduce-scatter outputs and nothing else of the tensor-parallel
// collectives, so a sequence-parallel layer's two all-gathers (in front of attention and the MLP)
// are redone in backward; Megatron's attention-core policy redoes none.
#include "planner/selective_comm.h"

#include <gtest/gtest.h>

#include "planner/comm_pricer.h"
#include "planner/cost_model.h"
#include "planner/model_spec.h"
#include "planner_test_support.h"

namespace strata {
namespace {

constexpr int64_t kBatch = 2, kSeq = 16, kWidth = 32;

TEST(PlannerSelectiveComm, PerOpPolicyRedoesTheAllGathersNotTheReduceScatters) {
  const double activation = static_cast<double>(kBatch * kSeq * kWidth) * 4;
  const ModelComm comm =
      model_comm(testing::small_llama_config(), kBatch, kSeq, 2, /*sp=*/true, DType::F32, TensorParallelInput::Shared);
  const std::vector<CommWork> redone = recomputed_collectives(comm.layer, SelectivePolicy::AlternateGemms);
  ASSERT_EQ(redone.size(), 2u);
  for (const CommWork& call : redone) {
    EXPECT_EQ(call.pattern, CommPattern::AllGather) << call.label;
    EXPECT_DOUBLE_EQ(call.bytes, activation) << call.label;
  }
  EXPECT_TRUE(recomputed_collectives(comm.layer, SelectivePolicy::AttentionCore).empty());
}

TEST(PlannerSelectiveComm, WithoutSequenceParallelismThePerOpPolicyRedoesTheAllReduces) {
  const double activation = static_cast<double>(kBatch * kSeq * kWidth) * 4;
  const ModelComm comm =
      model_comm(testing::small_llama_config(), kBatch, kSeq, 2, /*sp=*/false, DType::F32, TensorParallelInput::Shared);
  const std::vector<CommWork> redone = recomputed_collectives(comm.layer, SelectivePolicy::AlternateGemms);
  ASSERT_EQ(redone.size(), 2u);
  for (const CommWork& call : redone) {
    EXPECT_EQ(call.pattern, CommPattern::AllReduce) << call.label;
    EXPECT_DOUBLE_EQ(call.bytes, activation) << call.label;
  }
}

// Through the cost model, tp = 2 with sequence parallelism: the per-op policy adds a layer's two all-gathers,
// over 4 layers and 2 micro-batches, to the step's tensor-parallel time and to its recompute term; the
// reduce-scatters are unchanged.
TEST(PlannerSelectiveComm, CostModelPricesTheRedoneAllGathersInTheRecomputeTerm) {
  const ClusterSpec cluster = testing::test_cluster(1, 2, 1000);
  auto run = [&](SelectivePolicy policy) {
    PlanningProblem problem{"llama", testing::small_llama_config(), 4, kSeq, DType::F32, cluster};
    problem.selective = policy;
    problem.tp_input = TensorParallelInput::Shared;
    CostModel model(problem);
    ParallelPlan plan;
    plan.degrees.set("tp", 2);
    set_sequence_parallel(plan, true);
    plan.micro_batch = kBatch;
    plan.micro_batches = 2;
    plan.recompute = RecomputeMode::Selective;
    const Prediction prediction = model.evaluate(plan);
    return std::pair{prediction, model.attribute(prediction)};
  };
  const auto [titan, titan_parts] = run(SelectivePolicy::AlternateGemms);
  const auto [megatron, megatron_parts] = run(SelectivePolicy::AttentionCore);
  CommPricer pricer(cluster);
  const double one_gather =
      pricer.collective(comm::Collective::AllGather, static_cast<double>(kBatch * kSeq * kWidth) * 4, 2, 1);
  ASSERT_GT(one_gather, 0);
  const double redone = 2 * 4 * 2 * one_gather;
  EXPECT_NEAR(titan_parts.comm_seconds("tensor-parallel all-gather") - megatron_parts.comm_seconds("tensor-parallel all-gather"),
              redone, 1e-9 * redone);
  EXPECT_DOUBLE_EQ(titan_parts.comm_seconds("tensor-parallel reduce-scatter"),
                   megatron_parts.comm_seconds("tensor-parallel reduce-scatter"));
  // The recompute term: the redone kernels (what the attribution's compute holds beyond the step's forward and
  // backward kernels) and the redone all-gathers.
  double kernels = 0;
  for (const auto& [kind, part] : titan_parts.compute) kernels += part.seconds;
  EXPECT_NEAR(titan.time.recompute, kernels - titan.time.compute + redone, 1e-9 * titan.time.recompute);
}

}  // namespace
}  // namespace strata
