// The data-parallel reduction beside the last backward pass, bucket by bucket
// (issue 17's overlap model), and `plan --explain`: its terms add up to the
// predicted step, its compute by op type to the compute terms, and worse
// figures of the cluster make the step slower.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "planner/explain.h"
#include "planner/model_spec.h"
#include "planner_test_support.h"

namespace strata {
namespace {

PlanningProblem gpt2_small(const ClusterSpec& cluster, double bucket_bytes) {
  ModelSpec spec = model_preset("gpt2-small");
  PlanningProblem problem{spec.name, spec.config, 32, 256, DType::F32, cluster};
  problem.bucket_bytes = bucket_bytes;
  return problem;
}

ParallelPlan data_parallel(int dp) {
  ParallelPlan plan;
  plan.degrees.set("dp", dp);
  plan.micro_batch = 4;
  plan.micro_batches = 32 / (4 * dp);
  return plan;
}

// With one bucket nothing starts before the backward pass ends: the whole all-reduce is exposed.
// With small buckets the reduction runs beside the backward pass and only its tail shows.
TEST(PlannerOverlap, BucketsLetTheReductionRunBesideTheBackwardPass) {
  const ClusterSpec cluster = testing::test_cluster(1, 4, 64);
  CostModel one_bucket(gpt2_small(cluster, 1e12));
  const Prediction whole = one_bucket.evaluate(data_parallel(4));
  const Workload& work = one_bucket.workload(4, 1);
  const double params = 12 * work.layer.params + work.embedding.params + work.head.params;
  CommPricer pricer(cluster);
  EXPECT_NEAR(whole.time.reduction["dp"], pricer.collective(comm::Collective::AllReduce, 4 * params, 4, 1), 1e-9 * whole.step_s);

  CostModel buckets(gpt2_small(cluster, 4e6));
  const Prediction bucketed = buckets.evaluate(data_parallel(4));
  EXPECT_LT(bucketed.time.reduction["dp"], 0.5 * whole.time.reduction["dp"]);
  EXPECT_GT(bucketed.time.reduction["dp"], 0.0);  // the last bucket waits for the end of the pass
  EXPECT_DOUBLE_EQ(bucketed.time.overlap_slowdown, 0.0);  // the device describes no slowdown
}

TEST(PlannerOverlap, CollectivesBesideComputeSlowItDownByTheDescribedFraction) {
  ClusterSpec cluster = testing::test_cluster(1, 4, 64);
  CostModel fast(gpt2_small(cluster, 4e6));
  const Prediction before = fast.evaluate(data_parallel(4));
  cluster.device.comm_compute_slowdown = 0.2;
  CostModel slowed(gpt2_small(cluster, 4e6));
  const Prediction after = slowed.evaluate(data_parallel(4));
  // The slowdown is a fifth of the reduction that ran beside compute: more than nothing, less than
  // a fifth of the whole reduction run alone.
  CostModel one_bucket(gpt2_small(cluster, 1e12));
  const double whole = one_bucket.evaluate(data_parallel(4)).time.reduction["dp"];
  EXPECT_GT(after.time.overlap_slowdown, 0.0);
  EXPECT_LT(after.time.overlap_slowdown, 0.2 * whole * 1.5);
  EXPECT_NEAR(after.step_s, before.step_s + after.time.overlap_slowdown, 1e-9 * before.step_s);
}

TEST(PlannerExplain, TermsAddUpToTheStepAndWorseFiguresAreSlower) {
  const ClusterSpec cluster = testing::test_cluster(2, 4, 64);
  ModelSpec spec = model_preset("gpt2-medium");
  CostModel model(PlanningProblem{spec.name, spec.config, 32, 512, DType::F32, cluster});
  ParallelPlan winner;
  winner.degrees.set("dp", 2);
  winner.degrees.set("tp", 2);
  winner.degrees.set("pp", 2);
  set_sequence_parallel(winner, true);
  winner.micro_batch = 2;
  winner.micro_batches = 8;
  winner.recompute = RecomputeMode::Full;
  ParallelPlan other = winner;
  other.recompute = RecomputeMode::Selective;
  const Prediction first = model.evaluate(winner, CostModel::PipelineTiming::Replayed);
  const Prediction second = model.evaluate(other, CostModel::PipelineTiming::Replayed);
  const Explanation e = explain_plans(model, first, &second);
  for (const PlanExplanation* p : {&e.winner, &*e.runner_up}) {
    double sum = 0, compute = 0;
    for (const ExplainTerm& term : p->terms) {
      sum += term.seconds;
      if (term.name.starts_with("compute:")) compute += term.seconds;
    }
    EXPECT_NEAR(sum, p->prediction.step_s, 1e-9 * p->prediction.step_s) << p->prediction.plan.describe();
    // The same compute by op type: every op once, largest first, adding up to the compute terms.
    double by_op = 0;
    for (size_t i = 0; i < p->ops.size(); ++i) {
      by_op += p->ops[i].seconds;
      if (i > 0) {
        EXPECT_GE(p->ops[i - 1].seconds, p->ops[i].seconds);
      }
    }
    EXPECT_NEAR(by_op, compute, 1e-9 * compute) << p->prediction.plan.describe();
    EXPECT_TRUE(std::any_of(p->ops.begin(), p->ops.end(), [](const OpShare& o) { return o.op == "attention_backward"; }));
  }
  ASSERT_FALSE(e.sensitivities.empty());
  for (const Sensitivity& s : e.sensitivities) EXPECT_GE(s.winner_change, -1e-12) << s.figure;
  for (size_t i = 1; i < e.sensitivities.size(); ++i) {
    EXPECT_GE(std::fabs(e.sensitivities[i - 1].winner_change), std::fabs(e.sensitivities[i].winner_change));
  }
  const std::string text = format_explanation(e);
  EXPECT_NE(text.find("compute: GEMMs"), std::string::npos) << text;
  EXPECT_NE(text.find("pipeline bubble"), std::string::npos) << text;
  EXPECT_NE(text.find("sensitivity"), std::string::npos) << text;
}

}  // namespace
}  // namespace strata
