// The search: plans obey the constraints and the user's limits, the ranking
// does not depend on the order candidates come in, and known qualitative
// facts of parallel training hold on described clusters.
#include "planner/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>

#include "planner/model_spec.h"
#include "planner_test_support.h"

namespace strata {
namespace {

PlanningProblem problem(const std::string& model, const ClusterSpec& cluster, int64_t global_batch,
                        DType dtype = DType::BF16) {
  ModelSpec spec = model_preset(model);
  return {spec.name, spec.config, global_batch, spec.config.block_size, dtype, cluster};
}

ClusterSpec preset(const std::string& name, int nodes, double nic_gbps = 0) {
  ClusterSpec cluster = load_cluster(testing::preset_path(name));
  cluster.nodes = nodes;
  if (nic_gbps > 0) cluster.nic.bandwidth_Bps = nic_gbps * 1e9;
  return cluster;
}

void expect_valid(const CostModel& model, const Prediction& p) {
  const PlanningProblem& problem = model.problem();
  const ParallelPlan& plan = p.plan;
  EXPECT_EQ(plan.degree("dp") * plan.degree("tp") * plan.degree("pp"), problem.cluster.devices()) << plan.describe();
  EXPECT_EQ(problem.model.n_head % plan.degree("tp"), 0) << plan.describe();
  EXPECT_EQ(plan.degree("dp") * plan.micro_batch * plan.micro_batches, problem.global_batch) << plan.describe();
  EXPECT_LE(p.memory.peak, p.memory.capacity) << plan.describe();
  if (pipeline_schedule(plan) == PipelineSchedule::Interleaved) {
    EXPECT_EQ(plan.micro_batches % plan.degree("pp"), 0) << plan.describe();
  }
  EXPECT_EQ(static_cast<int>(p.layers_per_stage.size()), plan.degree("pp"));
  int layers = 0;
  for (int count : p.layers_per_stage) {
    EXPECT_GE(count, virtual_stages(plan)) << plan.describe();
    layers += count;
  }
  EXPECT_EQ(layers, problem.model.n_layer) << plan.describe();
  EXPECT_NEAR(p.time.total(), p.step_s, 1e-12 * p.step_s);
}

// The front runners' pipelines are timed by replaying the runtime's schedule. Without a pipeline
// that is m forwards and backwards in a row, which the closed form gives exactly; with one, no
// stage can finish before it has run its m micro-batches (the replay's lower bound), and a
// bubble is never negative.
TEST(PlannerSearch, TheFrontRunnersAreTimedByReplayingTheirSchedules) {
  CostModel model(problem("gpt2-medium", testing::test_cluster(2, 4, 12), 64, DType::F32));
  PlanLimits limits;
  SearchResult result = search_plans(model, limits, 40);
  ASSERT_FALSE(result.ranked.empty());
  int pipelines = 0;
  for (const Prediction& prediction : result.ranked) {
    const ParallelPlan& plan = prediction.plan;
    EXPECT_TRUE(prediction.schedule_replayed) << plan.describe();
    const Prediction closed = model.evaluate(plan, CostModel::PipelineTiming::ClosedForm);
    EXPECT_FALSE(closed.schedule_replayed);
    EXPECT_GE(prediction.time.bubble, -1e-12 * prediction.step_s) << plan.describe();
    if (plan.degree("pp") == 1) {
      EXPECT_NEAR(prediction.step_s, closed.step_s, 1e-12 * closed.step_s) << plan.describe();
    } else {
      ++pipelines;
      const double busiest = closed.time.total() - closed.time.bubble - closed.time.reduction["dp"] -
                             closed.time.overlap_slowdown - closed.time.optimizer - closed.time.param_gather;
      EXPECT_GE(prediction.step_s - prediction.time.reduction["dp"] - prediction.time.overlap_slowdown -
                    prediction.time.optimizer - prediction.time.param_gather,
                busiest * (1 - 1e-12))
          << plan.describe();
    }
  }
  EXPECT_GT(pipelines, 0) << "no pipeline among the front runners to replay";
}

TEST(PlannerSearch, RankedPlansObeyTheConstraints) {
  CostModel model(problem("gpt2-medium", testing::test_cluster(2, 4, 12), 64, DType::F32));
  SearchResult result = search_plans(model, {}, 50);
  ASSERT_FALSE(result.ranked.empty());
  EXPECT_GE(result.candidates, result.feasible);
  for (size_t i = 0; i < result.ranked.size(); ++i) {
    expect_valid(model, result.ranked[i]);
    if (i > 0) {
      EXPECT_FALSE(ranks_before(result.ranked[i], result.ranked[i - 1]));
    }
  }
  // 16 heads: a tensor-parallel degree of 3 is impossible on 8 devices only as a
  // non-divisor; what the search rejects it reports.
  for (const RejectedRegion& region : result.rejected) EXPECT_GT(region.count, 0) << region.reason;
}

TEST(PlannerSearch, RankingDoesNotDependOnCandidateOrder) {
  CostModel model(problem("gpt2-large", preset("dgx-a100-80gb", 2), 128));
  std::vector<RejectedRegion> rejected;
  std::vector<ParallelPlan> candidates = enumerate_plans(model, {}, rejected);
  SearchResult forward = rank_plans(model, candidates, 20);
  std::mt19937 shuffle(7);
  for (int round = 0; round < 3; ++round) {
    std::shuffle(candidates.begin(), candidates.end(), shuffle);
    SearchResult shuffled = rank_plans(model, candidates, 20);
    ASSERT_EQ(shuffled.ranked.size(), forward.ranked.size());
    for (size_t i = 0; i < forward.ranked.size(); ++i) {
      EXPECT_EQ(shuffled.ranked[i].plan.describe(), forward.ranked[i].plan.describe()) << "rank " << i;
      EXPECT_EQ(shuffled.ranked[i].step_s, forward.ranked[i].step_s);
    }
    EXPECT_EQ(shuffled.feasible, forward.feasible);
  }
}

TEST(PlannerSearch, HonoursTheUsersLimits) {
  CostModel model(problem("gpt2-large", preset("dgx-a100-80gb", 2), 128));
  PlanLimits limits;
  limits.largest.set("tp", 2);
  limits.fixed.set("pp", 2);
  limits.recompute = RecomputeMode::Selective;
  SearchResult result = search_plans(model, limits, 100);
  ASSERT_FALSE(result.ranked.empty());
  for (const Prediction& p : result.ranked) {
    EXPECT_LE(p.plan.degree("tp"), 2);
    EXPECT_EQ(p.plan.degree("pp"), 2);
    EXPECT_EQ(p.plan.recompute, RecomputeMode::Selective);
  }
  // Every dimension fixed: one plan, evaluated alone.
  PlanLimits manual;
  manual.fixed.set("dp", 4);
  manual.fixed.set("tp", 2);
  manual.fixed.set("pp", 2);
  fix_sequence_parallel(manual, true);
  manual.micro_batch = 4;
  manual.zero = 1;
  manual.recompute = RecomputeMode::None;
  fix_pipeline_schedule(manual, PipelineSchedule::OneFOneB);
  fix_virtual_stages(manual, 1);
  SearchResult one = search_plans(model, manual, 5);
  ASSERT_EQ(one.candidates, 1);
  ASSERT_EQ(one.ranked.size(), 1u);
  EXPECT_EQ(one.ranked[0].plan.describe(), "dp=4 tp=2 pp=2 sp mb=4x8 zero=1 recompute=none 1f1b");
  // Degrees that do not use the cluster: nothing to evaluate, and the report says why.
  manual.fixed.set("dp", 1);
  SearchResult none = search_plans(model, manual, 5);
  EXPECT_EQ(none.candidates, 0);
  ASSERT_EQ(none.rejected.size(), 1u);
  EXPECT_NE(none.rejected[0].reason.find("not the cluster's 16 devices"), std::string::npos);
  PlanLimits odd;
  odd.fixed.set("tp", 3);
  SearchResult three = search_plans(model, odd, 5);
  EXPECT_EQ(three.candidates, 0);
  ASSERT_EQ(three.rejected.size(), 1u);
  EXPECT_EQ(three.rejected[0].example, "tp=3");
}

TEST(PlannerSearch, ExplainsRejectedRegions) {
  // GPT-2 XL has 25 heads: on 8 devices only tp = 1 divides them; on a 16 GiB device
  // plans that keep every activation of a large micro-batch do not fit.
  CostModel model(problem("gpt2-xl", testing::test_cluster(1, 8, 16), 64, DType::F32));
  SearchResult result = search_plans(model, {}, 5);
  auto region = [&](const std::string& words) {
    for (const RejectedRegion& r : result.rejected) {
      if (r.reason.find(words) != std::string::npos) return &r;
    }
    return static_cast<const RejectedRegion*>(nullptr);
  };
  const RejectedRegion* heads = region("does not divide the 25 heads");
  ASSERT_NE(heads, nullptr);
  EXPECT_EQ(heads->count, 6);  // tp = 2 and 8 with any pp, tp = 4 with any pp: 2 + 1 + 3 layouts
  const RejectedRegion* memory = region("do not fit in device memory");
  ASSERT_NE(memory, nullptr);
  EXPECT_FALSE(memory->details.empty());
  EXPECT_NE(memory->details[0].find("GiB per device"), std::string::npos);
  ASSERT_FALSE(result.ranked.empty());
  EXPECT_EQ(result.ranked[0].plan.degree("tp"), 1);
}

// A schedule the user fixes is tried as given, past the search's own range of virtual stages, or refused with its
// reason: never "no plan" without one.
TEST(PlannerSearch, FixedScheduleOptionsAreTriedOrRefusedWithTheirReason) {
  CostModel model(problem("gpt2-large", preset("dgx-a100-80gb", 2), 128));  // 36 layers, 16 devices
  PlanLimits limits;
  limits.fixed.set("dp", 4);
  limits.fixed.set("tp", 2);
  limits.fixed.set("pp", 2);
  limits.micro_batch = 4;
  fix_pipeline_schedule(limits, PipelineSchedule::Interleaved);
  fix_virtual_stages(limits, 9);  // past the 8 the search tries by itself
  SearchResult nine = search_plans(model, limits, 5);
  ASSERT_FALSE(nine.ranked.empty());
  for (const Prediction& p : nine.ranked) EXPECT_EQ(virtual_stages(p.plan), 9) << p.plan.describe();
  auto only_reason = [&](const SearchResult& result) {
    EXPECT_TRUE(result.ranked.empty());
    EXPECT_EQ(result.rejected.size(), 1u);
    return result.rejected.empty() ? std::string() : result.rejected[0].reason;
  };
  fix_virtual_stages(limits, 19);  // 2 x 19 chunks for 36 layers
  EXPECT_EQ(only_reason(search_plans(model, limits, 5)),
            "plans whose fixed virtual stages cannot run: 38 pipeline chunks for 36 layers (every chunk needs a "
            "layer)");
  fix_virtual_stages(limits, 1);
  EXPECT_EQ(only_reason(search_plans(model, limits, 5)),
            "plans whose fixed virtual stages cannot run: interleaving needs pp >= 2 and virtual stages >= 2");
  fix_pipeline_schedule(limits, PipelineSchedule::GPipe);
  fix_virtual_stages(limits, 2);
  EXPECT_EQ(only_reason(search_plans(model, limits, 5)),
            "plans whose fixed virtual stages cannot run: virtual stages need the interleaved schedule");
  limits.fixed.set("dp", 8);
  limits.fixed.set("pp", 1);
  EXPECT_EQ(only_reason(search_plans(model, limits, 5)),
            "plans of one pipeline stage with a schedule or virtual stages fixed");
}

TEST(PlannerSearch, PricesTheTimeOfFittingPlansOnlyAndRanksAsPricingEveryPlanWould) {
  // The search places each candidate first and prices its time only when it fits: against pricing
  // every candidate in full, the same plans fit, the closest miss is the same, and with every fitting
  // plan kept the ranking is every fitting plan's replayed time in order.
  CostModel model(problem("gpt2-xl", testing::test_cluster(1, 8, 16), 64, DType::F32));
  std::vector<RejectedRegion> rejected;
  const std::vector<ParallelPlan> candidates = enumerate_plans(model, {}, rejected);
  std::vector<Prediction> fitting;
  std::optional<Prediction> closest_miss;
  for (const ParallelPlan& plan : candidates) {
    if (model.invalid_reason(plan)) continue;
    Prediction full = model.evaluate(plan);
    if (full.fits()) {
      fitting.push_back(model.evaluate(plan, CostModel::PipelineTiming::Replayed));
    } else if (!closest_miss || full.memory.peak < closest_miss->memory.peak ||
               (full.memory.peak == closest_miss->memory.peak &&
                full.plan.describe() < closest_miss->plan.describe())) {
      closest_miss = full;
    }
  }
  ASSERT_FALSE(fitting.empty());
  ASSERT_TRUE(closest_miss.has_value());
  std::sort(fitting.begin(), fitting.end(), ranks_before);
  const SearchResult result = rank_plans(model, candidates, fitting.size());
  EXPECT_EQ(result.feasible, static_cast<int64_t>(fitting.size()));
  ASSERT_EQ(result.ranked.size(), fitting.size());
  for (size_t i = 0; i < fitting.size(); ++i) {
    EXPECT_EQ(result.ranked[i].plan.describe(), fitting[i].plan.describe()) << i;
    EXPECT_EQ(result.ranked[i].step_s, fitting[i].step_s) << i;
  }
  ASSERT_FALSE(result.rejected.empty());
  EXPECT_EQ(result.rejected.back().example, closest_miss->plan.describe());
}

TEST(PlannerSearch, PureDataParallelismWinsWhenTheModelFitsAndTheNetworkIsFast) {
  for (const char* cluster : {"dgx-a100-80gb", "dgx-h100"}) {
    CostModel model(problem("gpt2-small", preset(cluster, 2), 512));
    SearchResult result = search_plans(model, {}, 1);
    ASSERT_FALSE(result.ranked.empty());
    const ParallelPlan& best = result.ranked[0].plan;
    EXPECT_EQ(best.degree("dp"), 16) << cluster << ": " << best.describe();
  }
}

TEST(PlannerSearch, TensorParallelismStaysInsideNodesWhenTheModelDoesNotFit) {
  CostModel model(problem("gpt3-175b", preset("dgx-a100-80gb", 8), 256));
  // Weights, master weights, gradients and moments alone: 18 bytes per parameter, 3 TB.
  double state = 18.0 * static_cast<double>(model.problem().model.num_parameters());
  ASSERT_GT(state, 30 * model.problem().cluster.device.usable_memory_bytes());
  SearchResult result = search_plans(model, {}, 10);
  ASSERT_FALSE(result.ranked.empty());
  for (const Prediction& p : result.ranked) {
    EXPECT_LE(p.plan.degree("tp"), 8) << p.plan.describe();
  }
  PlanLimits wide;
  wide.fixed.set("tp", 16);  // across two nodes: it can run, but loses
  SearchResult across = search_plans(model, wide, 1);
  ASSERT_FALSE(across.ranked.empty());
  EXPECT_GT(across.ranked[0].step_s, result.ranked.back().step_s);
}

TEST(PlannerSearch, ASlowInterNodeLinkPushesPipelineParallelismAcrossNodes) {
  auto best = [](double nic_gbps) {
    CostModel model(problem("gpt2-xl", preset("dgx-h100", 4, nic_gbps), 256));
    SearchResult result = search_plans(model, {}, 1);
    EXPECT_FALSE(result.ranked.empty());
    return result.ranked.front().plan;
  };
  ParallelPlan fast = best(45);
  ParallelPlan slow = best(1);
  EXPECT_EQ(fast.degree("pp"), 1) << fast.describe();
  // Slow network: data and tensor groups inside a node, only pipeline stages cross nodes.
  EXPECT_GE(slow.degree("pp"), 4) << slow.describe();
  EXPECT_LE(slow.degree("dp") * slow.degree("tp"), 8) << slow.describe();
}

TEST(PlannerSearch, UnevenSplitsGiveTheHeadsStageFewerLayers) {
  // GPT-2 small's LM head (vocabulary 50257) costs about as much as several layers.
  ModelSpec spec = model_preset("gpt2-small");
  CostModel model(PlanningProblem{spec.name, spec.config, 64, 1024, DType::F32, testing::test_cluster(1, 4, 64)});
  ParallelPlan plan;
  plan.degrees.set("pp", 4);
  plan.micro_batch = 4;
  plan.micro_batches = 16;
  Prediction p = model.evaluate(plan);
  EXPECT_LT(p.layers_per_stage.back(), p.layers_per_stage.front());
  EXPECT_EQ(p.layers_per_stage[0] + p.layers_per_stage[1] + p.layers_per_stage[2] + p.layers_per_stage[3], 12);
}

}  // namespace
}  // namespace strata
