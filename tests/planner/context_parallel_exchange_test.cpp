// Context parallelism's exchange as PyTorch's context_parallel runs it (strata plan --cp-exchange allgather |
// alltoall; context_parallel_exchange.cpp): the bytes it sends per layer (every query head's K/V, the gradients
// in fp32), what runs past the attention blocks as torch's loops wait for it, where the option is refused, and the
// default ring's figures untouched. References by hand from the test cluster's link (1 us, 100 GB/s).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "planner/comm_pricer.h"
#include "planner/model_comm.h"
#include "planner/plan_dimension.h"
#include "planner/report.h"
#include "planner/search.h"
#include "planner_test_support.h"

namespace strata {
namespace {

constexpr int64_t kRows = 2, kSeq = 16;  // a micro-batch of the small Llama: 4 heads of 8, 2 key/value heads

PlanningProblem small_llama() {
  return PlanningProblem{"small-llama", testing::small_llama_config(), 8, kSeq, DType::F32,
                         testing::test_cluster(1, 4, 64)};
}

ParallelPlan context_parallel(int cp, ContextParallelExchange exchange) {
  ParallelPlan plan;
  plan.degrees.set("dp", 4 / cp);
  plan.degrees.set("cp", cp);
  plan.micro_batch = kRows;
  plan.micro_batches = 8 / (kRows * (4 / cp));  // the global batch of 8 sequences
  set_context_parallel_exchange(plan, exchange);
  return plan;
}

// The layer's exchange at `cp`, its attention op taking `attention_seconds`, the K/V in `dtype` (the test device
// prices f32 work only: the shapes are the same in any dtype).
MicroBatchComm exchange_comm(CostModel& model, CommPricer& pricer, int cp, ContextParallelExchange exchange,
                             double attention_seconds, DType dtype = DType::F32) {
  const ParallelPlan plan = context_parallel(cp, exchange);
  const Workload& work = model.workload(kRows, 1, cp);
  PlanningProblem problem = model.problem();
  problem.dtype = dtype;
  const ModelComm graph = model_comm(problem.model, kRows, kSeq / cp, 1, false, dtype);
  const CommInput input{problem, plan, cp, 1, graph, pricer, kSeq / cp, &work.layer,
                        [&](const OpWork&) { return attention_seconds; }};
  return context_parallel_planning().micro_batch_comm(input);
}

// One message of `bytes` between neighbours on the test cluster's link.
double message(double bytes) { return 1e-6 + bytes / 100e9; }

// A rank's K/V at cp = 2: its 8 positions of 2 rows, every one of the 4 query heads of 8 (torchtitan expands the
// 2 key/value heads before SDPA), K and V, 4 bytes each (f32 here; the gradients are f32 whatever the dtype).
constexpr double kBlockBytes = 2.0 * kRows * 4 * (kSeq / 2) * 8 * 4;

TEST(TorchContextParallel, TheAllGatherFetchesEveryRanksKeysAndValuesOnceAPass) {
  const ClusterSpec cluster = testing::test_cluster(1, 4, 64);
  CostModel model(small_llama());
  CommPricer pricer(cluster);
  // The all-gather of the 2 ranks' blocks (nccl-tests' size: the whole output) on the pricer's formula for the group.
  const double gather = pricer.collective(comm::Collective::AllGather, 2 * kBlockBytes, 2, 1);
  EXPECT_NEAR(gather, message(kBlockBytes), 1e-12);  // two ranks: one neighbour's block, one step
  // Attention of 0.4 us per op, 0.2 us per ring step: forward the gather runs beside the first block only.
  const MicroBatchComm shown = exchange_comm(model, pricer, 2, ContextParallelExchange::AllGather, 0.4e-6);
  EXPECT_NEAR(shown.layer.forward, gather - 0.2e-6, 1e-12);
  // Backward gathers again beside the first block; the first step's dK/dV go beside the second block; the last
  // step's are waited for with nothing beside them.
  const double gradients = message(kBlockBytes);
  EXPECT_NEAR(shown.layer.backward, (gather - 0.2e-6) + (gradients - 0.2e-6) + gradients, 1e-12);
  // Attention far longer than any transfer: all is hidden but the last gradients.
  const MicroBatchComm hidden = exchange_comm(model, pricer, 2, ContextParallelExchange::AllGather, 1.0);
  EXPECT_DOUBLE_EQ(hidden.layer.forward, 0.0);
  EXPECT_NEAR(hidden.layer.backward, gradients, 1e-15);
}

TEST(TorchContextParallel, TheGradientsTravelInFp32WhateverTheComputeDtype) {
  const ClusterSpec cluster = testing::test_cluster(1, 4, 64);
  CostModel model(small_llama());
  CommPricer pricer(cluster);
  const MicroBatchComm hidden =
      exchange_comm(model, pricer, 2, ContextParallelExchange::AllGather, 1.0, DType::BF16);
  EXPECT_NEAR(hidden.layer.backward, message(kBlockBytes), 1e-15);  // bf16 K/V, but 4-byte dK/dV
  const double gather = pricer.collective(comm::Collective::AllGather, kBlockBytes, 2, 1, DType::BF16);
  const MicroBatchComm shown =
      exchange_comm(model, pricer, 2, ContextParallelExchange::AllGather, 0.4e-6, DType::BF16);
  EXPECT_NEAR(gather, message(kBlockBytes / 2), 1e-12);
  EXPECT_NEAR(shown.layer.forward, gather - 0.2e-6, 1e-12);  // the K/V gathered in bf16: half the bytes
}

TEST(TorchContextParallel, TheAllToAllSendsTheBlockOnBeforeEveryStepButTheLast) {
  const ClusterSpec cluster = testing::test_cluster(1, 4, 64);
  CostModel model(small_llama());
  CommPricer pricer(cluster);
  // cp = 4: blocks of 4 positions (half the bytes), steps of 0.1 us. Forward three K/V messages, each beside a
  // block. Backward: the first block hides a K/V message, the two between a step's gradients and the next K/V on
  // the same stream, the last block the third gradients, and the fourth show whole.
  const double kv = message(kBlockBytes / 2), gradients = message(kBlockBytes / 2);
  const MicroBatchComm four = exchange_comm(model, pricer, 4, ContextParallelExchange::AllToAll, 0.4e-6);
  EXPECT_NEAR(four.layer.forward, 3 * (kv - 0.1e-6), 1e-12);
  EXPECT_NEAR(four.layer.backward, (kv - 0.1e-6) + 2 * (kv + gradients - 0.1e-6) + (gradients - 0.1e-6) + gradients,
              1e-12);
}

TEST(TorchContextParallel, TheRingStaysTheDefaultWithItsFiguresUnchanged) {
  const ClusterSpec cluster = testing::test_cluster(1, 4, 64);
  CostModel model(small_llama());
  CommPricer pricer(cluster);
  // Transformer Engine's ring at cp = 2 (context_parallel_test's figures): the 2 key/value heads' K/V once forward.
  const MicroBatchComm ring = exchange_comm(model, pricer, 2, ContextParallelExchange::Ring, 0.4e-6);
  EXPECT_NEAR(ring.layer.forward, message(kBlockBytes / 2) - 0.2e-6, 1e-12);
  EXPECT_NEAR(ring.layer.backward, 2 * (message(kBlockBytes / 2) - 0.2e-6), 1e-12);
  // A plan without the option is the ring's, described and recorded as before.
  ParallelPlan plain = context_parallel(2, ContextParallelExchange::Ring);
  const ParallelPlan unset;
  EXPECT_EQ(context_parallel_exchange(unset), ContextParallelExchange::Ring);
  EXPECT_EQ(plain.describe().find("cp-"), std::string::npos);
  EXPECT_FALSE(prediction_json(model.evaluate(plain))["plan"].contains("cp_exchange"));
}

TEST(TorchContextParallel, ThePlanSaysWhichExchangeItPrices) {
  CostModel model(small_llama());
  PlanLimits limits;
  limits.fixed.set("cp", 2);
  fix_context_parallel_exchange(limits, ContextParallelExchange::AllGather);
  const SearchResult result = search_plans(model, limits, 1000);
  ASSERT_FALSE(result.ranked.empty());
  for (const Prediction& prediction : result.ranked) {
    EXPECT_EQ(context_parallel_exchange(prediction.plan), ContextParallelExchange::AllGather);
    EXPECT_NE(prediction.plan.describe().find(" cp-allgather "), std::string::npos) << prediction.plan.describe();
  }
  EXPECT_EQ(prediction_json(result.ranked[0])["plan"]["cp_exchange"], "allgather");
}

TEST(TorchContextParallel, AnExchangeWithoutContextParallelismOrAnUnknownOneIsRefused) {
  CostModel model(small_llama());
  PlanLimits limits;
  fix_context_parallel_exchange(limits, ContextParallelExchange::AllToAll);
  const SearchResult result = search_plans(model, limits, 1000);
  EXPECT_TRUE(result.ranked.empty());
  const std::string reason = "the context-parallel exchange alltoall needs context parallelism > 1 (--cp N)";
  EXPECT_TRUE(std::any_of(result.rejected.begin(), result.rejected.end(),
                          [&](const RejectedRegion& region) { return region.reason == reason; }));
  EXPECT_EQ(model.invalid_reason(context_parallel(1, ContextParallelExchange::AllToAll)), reason);
  const PlannerDimension dimension = context_parallel_planning();
  const OptionFlag& flag = dimension.option_flags.at(0);
  EXPECT_EQ(flag.name, "cp-exchange");
  try {
    flag.fix("p2p", limits);
    FAIL() << "an unknown exchange was taken";
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()), "--cp-exchange must be ring, allgather or alltoall, got 'p2p'");
  }
}

}  // namespace
}  // namespace strata
