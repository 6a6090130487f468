// Context parallelism as the planner prices it (context_parallel_planning.cpp): a device works on seq/cp
// positions and does its cp ring steps of the causal attention, the keys and values go around the ring beside
// the attention blocks, the gradients are reduced over dp x cp, a degree that cannot cut the sequence into
// 2·cp chunks is refused, and the report says the plan is not Strata's to run. References by hand.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "parallel/parallel_dimension.h"
#include "planner/comm_pricer.h"
#include "planner/explain.h"
#include "planner/model_comm.h"
#include "planner/plan_dimension.h"
#include "planner/report.h"
#include "planner/search.h"
#include "planner_test_support.h"

namespace strata {
namespace {

constexpr int64_t kRows = 2, kSeq = 16;  // a micro-batch of the small Llama

PlanningProblem small_llama(const ClusterSpec& cluster, int64_t seq = kSeq) {
  return PlanningProblem{"small-llama", testing::small_llama_config(), 8, seq, DType::F32, cluster};
}

ParallelPlan context_parallel(int dp, int cp, int64_t micro_batch = kRows) {
  ParallelPlan plan;
  plan.degrees.set("dp", dp);
  plan.degrees.set("cp", cp);
  plan.micro_batch = micro_batch;
  plan.micro_batches = 8 / (micro_batch * dp);
  return plan;
}

double flops_of(const std::vector<OpWork>& ops, OpKind kind) {
  double flops = 0;
  for (const OpWork& op : ops) flops += op.kind == kind ? op.flops : 0.0;
  return flops;
}

const OpWork& attention_of(const std::vector<OpWork>& ops) {
  for (const OpWork& op : ops) {
    if (op.kind == OpKind::Attention) return op;
  }
  throw std::runtime_error("no attention op");
}

TEST(ContextParallel, EveryTokenWiseOpWorksOnItsShareOfTheSequence) {
  CostModel model(small_llama(testing::test_cluster(1, 4, 64)));
  const Workload& whole = model.workload(kRows, 1, 1);
  const Workload& half = model.workload(kRows, 1, 2);
  // The small Llama's linears per token: q (32x32), k and v (32x16 each), o (32x32), gate, up and down (32x48).
  const double linear_flops_per_token = 2.0 * (32 * 32 + 2 * 32 * 16 + 32 * 32 + 3 * 32 * 48);
  EXPECT_DOUBLE_EQ(flops_of(whole.layer.forward, OpKind::Gemm), kRows * kSeq * linear_flops_per_token);
  EXPECT_DOUBLE_EQ(flops_of(half.layer.forward, OpKind::Gemm), kRows * (kSeq / 2) * linear_flops_per_token);
  EXPECT_DOUBLE_EQ(half.layer.saved[0].total(1), whole.layer.saved[0].total(1) / 2);  // activations kept
  // Attention: two ring steps, each the causal block of 8 local positions (8·9/2 query-key pairs), QK^T and PV
  // over 4 heads of 8: 2 multiply-adds of width 32 per pair and row.
  const OpWork& attention = attention_of(half.layer.forward);
  EXPECT_EQ(attention.attention.ring_steps, 2);
  EXPECT_DOUBLE_EQ(attention.flops, 2 * (4.0 * kRows * (8.0 * 9 / 2) * 32));
  EXPECT_EQ(attention_of(half.layer.backward).attention.ring_steps, 2);
}

// The ring's keys and values per step: the local 8 positions of 2 rows, 2 key/value heads of 8, K and V, f32.
constexpr double kKeyValueBlockBytes = 2.0 * kRows * 2 * (kSeq / 2) * 8 * 4;

MicroBatchComm ring_comm(CostModel& model, CommPricer& pricer, int cp, double attention_seconds) {
  const ParallelPlan plan = context_parallel(1, cp);
  const Workload& work = model.workload(kRows, 1, cp);
  const ModelComm graph = model_comm(model.problem().model, kRows, kSeq / cp, 1, false, DType::F32);
  const CommInput input{model.problem(), plan, cp, 1, graph, pricer, kSeq / cp, &work.layer,
                        [&](const OpWork&) { return attention_seconds; }};
  return context_parallel_planning().micro_batch_comm(input);
}

TEST(ContextParallel, TheRingShowsWhatItsTransfersTakeBeyondTheAttentionBlocks) {
  const ClusterSpec cluster = testing::test_cluster(1, 4, 64);
  CostModel model(small_llama(cluster));
  CommPricer pricer(cluster);
  // The test cluster's link: 1 us, 100 GB/s.
  const double one_block = 1e-6 + kKeyValueBlockBytes / 100e9;
  EXPECT_NEAR(pricer.point_to_point(kKeyValueBlockBytes, 1), one_block, 1e-12);
  // Attention far longer than a transfer: the ring is hidden.
  const MicroBatchComm hidden = ring_comm(model, pricer, 2, 1.0);
  EXPECT_DOUBLE_EQ(hidden.layer.forward, 0.0);
  EXPECT_DOUBLE_EQ(hidden.layer.backward, 0.0);
  // Attention of 0.4 us per op, 0.2 us per ring step at cp = 2: forward one K/V transfer beside one block;
  // backward K/V beside the first block and dK/dV beside the second.
  const MicroBatchComm shown = ring_comm(model, pricer, 2, 0.4e-6);
  EXPECT_NEAR(shown.layer.forward, one_block - 0.2e-6, 1e-12);
  EXPECT_NEAR(shown.layer.backward, 2 * (one_block - 0.2e-6), 1e-12);
  EXPECT_DOUBLE_EQ(shown.embedding.forward + shown.head.backward, 0.0);
  // cp = 4 (local blocks of 4 positions, half the bytes): three K/V transfers forward; backward K/V first, dK/dV
  // last, both at once in the two steps between. Ring steps of 0.1 us; the hop from the last rank to the first is
  // 3 devices away, priced like the others inside a node.
  const double quarter = 1e-6 + kKeyValueBlockBytes / 2 / 100e9, both = 1e-6 + kKeyValueBlockBytes / 100e9;
  const MicroBatchComm four = ring_comm(model, pricer, 4, 0.4e-6);
  EXPECT_NEAR(four.layer.forward, 3 * (quarter - 0.1e-6), 1e-12);
  EXPECT_NEAR(four.layer.backward, 2 * (quarter - 0.1e-6) + 2 * (both - 0.1e-6), 1e-12);
}

// Megatron-Core's rank order: tp fastest, then cp, then (ep,) dp, pp outermost.
TEST(ContextParallel, ItsRanksSitRightOutsideTensorParallelism) {
  std::vector<std::string> order;
  for (size_t position : InnermostFirst()) order.push_back(planned_dimension_at(position).name);
  EXPECT_EQ(order, (std::vector<std::string>{"tp", "cp", "ep", "dp", "pp"}));
}

TEST(ContextParallel, GradientsAreReducedOverDataTimesContextRanks) {
  const ClusterSpec cluster = testing::test_cluster(1, 4, 64);
  PlanningProblem problem = small_llama(cluster);
  problem.bucket_bytes = 1e12;  // one bucket: the whole reduction runs after the backward pass
  CostModel model(problem);
  const Prediction prediction = model.evaluate(context_parallel(2, 2));
  const Workload& work = model.workload(kRows, 1, 2);
  const double params = 4 * work.layer.params + work.embedding.params + work.head.params;
  CommPricer pricer(cluster);
  EXPECT_NEAR(prediction.time.reduction["dp"], pricer.collective(comm::Collective::AllReduce, 4 * params, 4, 1),
              1e-9 * prediction.step_s);
  // ZeRO-1 shards the optimizer's moments over the same 4 replicas.
  ParallelPlan sharded = context_parallel(2, 2);
  sharded.zero = 1;
  EXPECT_NEAR(model.evaluate(sharded).memory.optimizer, 2 * 4.0 * params / 4, 1e-6 * params);
}

TEST(ContextParallel, ADegreeThatCannotCutTheSequenceIntoTwoChunksPerRankIsRefused) {
  CostModel model(small_llama(testing::test_cluster(1, 4, 64), 14));  // 14 tokens: not 4 equal chunks
  PlanLimits limits;
  limits.fixed.set("cp", 2);
  const SearchResult result = search_plans(model, limits, 4);
  EXPECT_TRUE(result.ranked.empty());
  ASSERT_EQ(result.rejected.size(), 1u);
  EXPECT_EQ(result.rejected[0].reason,
            "context parallelism 2 does not cut the sequence of 14 tokens into 4 equal chunks (two per rank, which "
            "balances the causal mask's work)");
  EXPECT_EQ(model.invalid_reason(context_parallel(2, 2)), result.rejected[0].reason);
}

TEST(ContextParallel, TheSearchPricesItOnlyAtTheDegreeTheUserFixes) {
  CostModel model(small_llama(testing::test_cluster(1, 4, 64)));
  for (const Prediction& prediction : search_plans(model, PlanLimits{}, 1000).ranked) {
    EXPECT_EQ(prediction.plan.degree("cp"), 1) << prediction.plan.describe();
  }
  PlanLimits limits;
  limits.fixed.set("cp", 2);
  const SearchResult fixed = search_plans(model, limits, 1000);
  ASSERT_FALSE(fixed.ranked.empty());
  for (const Prediction& prediction : fixed.ranked) EXPECT_EQ(prediction.plan.degree("cp"), 2);
}

TEST(ContextParallel, ThePlanAndItsExplanationShowTheRingAndThatStrataDoesNotRunIt) {
  const ClusterSpec cluster = testing::test_cluster(1, 4, 64, 10, /*intra_gbps=*/0.01);  // a slow link: the ring shows
  CostModel model(small_llama(cluster));
  const Prediction prediction = model.evaluate(context_parallel(2, 2));
  EXPECT_GT(prediction.time.comm["cp"], 0.0);
  const nlohmann::json json = prediction_json(prediction);
  EXPECT_EQ(json["plan"]["cp"], 2);
  EXPECT_DOUBLE_EQ(json["time_s"]["cp_comm"].get<double>(), prediction.time.comm["cp"]);
  EXPECT_NE(json["plan"]["not_run_by_strata"].get<std::string>().find("does not execute"), std::string::npos);
  const std::string text = format_explanation(explain_plans(model, prediction, nullptr));
  EXPECT_NE(text.find("context-parallel K/V ring"), std::string::npos);
  EXPECT_NE(text.find("context parallelism (cp=2) is priced as other runtimes run it"), std::string::npos);
  // At cp = 1 the plan's JSON has neither, as plans were recorded before.
  const nlohmann::json plain = prediction_json(model.evaluate(context_parallel(4, 1)));
  EXPECT_FALSE(plain["plan"].contains("cp"));
  EXPECT_FALSE(plain["plan"].contains("not_run_by_strata"));
  EXPECT_FALSE(plain["time_s"].contains("cp_comm"));
}

}  // namespace
}  // namespace strata
