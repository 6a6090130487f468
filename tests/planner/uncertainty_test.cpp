// Step-time intervals from the cluster description's assumed figures (planner/uncertainty.h): which sources
// count as measured, the interval of a one-figure cluster by hand, and the report's overlap sentence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "planner/model_spec.h"
#include "planner/report.h"
#include "planner/search.h"
#include "planner/uncertainty.h"
#include "planner_test_support.h"

namespace strata {
namespace {

PlanningProblem gpt2_small(const ClusterSpec& cluster) {
  ModelSpec spec = model_preset("gpt2-small");
  return PlanningProblem{spec.name, spec.config, 32, 256, DType::F32, cluster};
}

ParallelPlan one_device(int64_t micro_batch) {
  ParallelPlan plan;
  plan.micro_batch = micro_batch;
  plan.micro_batches = 32 / micro_batch;
  return plan;
}

// Every figure measured except the launch overhead, an assumption.
ClusterSpec launch_overhead_assumed(double overhead_s) {
  ClusterSpec cluster = testing::test_cluster(1, 1, 64);
  for (auto& [key, source] : cluster.figure_sources) source = "measured by a test";
  cluster.figure_sources["device.op_overhead_us"] = "assumption: a test";
  cluster.device.op_overhead_s = overhead_s;
  return cluster;
}

std::vector<std::string> figure_names(const std::vector<UncertainFigure>& figures) {
  std::vector<std::string> names;
  for (const UncertainFigure& f : figures) names.push_back(f.figure);
  return names;
}

bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(PlannerUncertainty, SourcesSayWhetherAFigureWasMeasured) {
  EXPECT_EQ(figure_basis("fitted by `strata fit-device` to bench/planner/gpu/measurements/h200.json"),
            FigureBasis::Measured);
  EXPECT_EQ(figure_basis("measured by bench/planner/gpu/measure_sustained.py"), FigureBasis::Measured);
  EXPECT_EQ(figure_basis("NVIDIA A100 80GB SXM datasheet: 2,039 GB/s HBM2e"), FigureBasis::Specification);
  EXPECT_EQ(figure_basis("A100 whitepaper: 108 SMs"), FigureBasis::Specification);
  EXPECT_EQ(figure_basis("cuBLAS documentation: 16-byte aligned leading dimensions; efficiency assumed"),
            FigureBasis::Assumed);
  // A measurement elsewhere quoted in an assumption does not make it measured.
  EXPECT_EQ(figure_basis("assumption: share of the bandwidth (an H200 measured 0.89)"), FigureBasis::Assumed);
  EXPECT_EQ(figure_basis("FlashAttention-2 paper (Dao 2023): forward 50-73% of A100 peak"), FigureBasis::Assumed);
}

// The presets: the H200's engine is fitted to its kernels, the A100's assumed.
TEST(PlannerUncertainty, FittedEnginesAreHeldAndAssumedOnesVaried) {
  ModelSpec spec = model_preset("gpt2-small");
  PlanningProblem h200{spec.name, spec.config, 32, 256, DType::BF16, load_cluster(testing::preset_path("dgx-h200"))};
  const std::vector<std::string> fitted = figure_names(uncertain_figures(h200));
  for (const char* held : {"matrix peak", "GEMM tile efficiencies", "GEMM fixed cost per tile", "attention efficiencies",
                           "memory bandwidth reached", "sustained matrix rate", "vector peak (bf16)"}) {
    EXPECT_FALSE(has(fitted, held)) << held;
  }
  for (const char* varied : {"launch overhead", "intra-node bandwidth", "compute slowdown beside collectives"}) {
    EXPECT_TRUE(has(fitted, varied)) << varied;
  }
  PlanningProblem a100 = h200;
  a100.cluster = load_cluster(testing::preset_path("dgx-a100-80gb"));
  const std::vector<std::string> assumed = figure_names(uncertain_figures(a100));
  for (const char* varied : {"GEMM tile efficiencies", "attention efficiencies", "memory bandwidth reached"}) {
    EXPECT_TRUE(has(assumed, varied)) << varied;
  }
  EXPECT_FALSE(has(assumed, "matrix peak"));  // the datasheet's 312 TFLOP/s
}

// One assumed figure, the launch overhead o, which the step time is linear in (every kernel pays it once):
// step(o) = step(0) + N o, so its sensitivity is N o and the interval is step(o) -/+ range * N o exactly.
TEST(PlannerUncertainty, OneAssumedFigureGivesItsSensitivityTimesTheRange) {
  const double overhead = 20e-6;
  CostModel model(gpt2_small(launch_overhead_assumed(overhead)));
  const std::vector<Prediction> plans = {model.evaluate(one_device(4), CostModel::PipelineTiming::Replayed),
                                         model.evaluate(one_device(8), CostModel::PipelineTiming::Replayed)};
  CostModel without(gpt2_small(launch_overhead_assumed(0)));
  const StepIntervals intervals = step_intervals(model, plans, 0.1);
  ASSERT_EQ(intervals.figures.size(), 1u);
  EXPECT_EQ(intervals.figures[0].figure, "launch overhead");
  EXPECT_EQ(intervals.figures[0].keys, std::vector<std::string>{"device.op_overhead_us"});
  std::vector<double> launches_s;
  for (size_t i = 0; i < plans.size(); ++i) {
    launches_s.push_back(plans[i].step_s -
                         without.evaluate(plans[i].plan, CostModel::PipelineTiming::Replayed).step_s);
    ASSERT_GT(launches_s[i], 0.0);
    EXPECT_NEAR(intervals.plans[i].low_s, plans[i].step_s - 0.1 * launches_s[i], 1e-9 * plans[i].step_s);
    EXPECT_NEAR(intervals.plans[i].high_s, plans[i].step_s + 0.1 * launches_s[i], 1e-9 * plans[i].step_s);
  }
  // The smaller micro-batch launches its kernels twice as often: the figure moves the two plans' gap by the
  // range times the difference of their sensitivities.
  ASSERT_GT(launches_s[0], launches_s[1]);
  EXPECT_DOUBLE_EQ(intervals.gap_closing_s[0], 0.0);
  EXPECT_NEAR(intervals.gap_closing_s[1], 0.1 * (launches_s[0] - launches_s[1]), 1e-9 * plans[0].step_s);
  const StepIntervals exact = step_intervals(model, plans, 0.0);
  EXPECT_DOUBLE_EQ(exact.plans[0].low_s, plans[0].step_s);
  EXPECT_DOUBLE_EQ(exact.plans[0].high_s, plans[0].step_s);
  EXPECT_THROW(step_intervals(model, plans, 1.0), std::exception);
}

// The variations are priced by models that share the base model's cluster-free work (with_cluster): each must
// price every plan, pipelines replayed, exactly as a model built afresh on the varied cluster does, after the base
// model has filled what they share.
TEST(PlannerUncertainty, AModelOnAVariedClusterPricesAsOneBuiltAfreshOnIt) {
  ModelSpec spec = model_preset("gpt2-medium");
  const PlanningProblem base_problem{spec.name, spec.config, 64, spec.config.block_size, DType::F32,
                                     testing::test_cluster(2, 4, 12)};
  CostModel base(base_problem);
  // Pipelines (interleaved among them) and tensor parallelism, each priced by the base model first.
  std::vector<RejectedRegion> rejected;
  std::vector<Prediction> plans;
  int pipelines = 0, interleaved = 0, tensor_parallel = 0;
  for (const ParallelPlan& plan : enumerate_plans(base, PlanLimits{}, rejected)) {
    if (base.invalid_reason(plan)) continue;
    const bool pipelined = plan.degree("pp") > 1, sharded = plan.degree("tp") > 1;
    const bool interleaving = pipeline_schedule(plan) == PipelineSchedule::Interleaved;
    if (!(pipelined && pipelines < 8) && !(interleaving && interleaved < 4) && !(sharded && tensor_parallel < 8)) {
      continue;
    }
    pipelines += pipelined;
    interleaved += interleaving;
    tensor_parallel += sharded;
    plans.push_back(base.evaluate(plan, CostModel::PipelineTiming::Replayed));
  }
  ASSERT_GE(pipelines, 8);
  ASSERT_GE(interleaved, 4);
  ASSERT_GE(tensor_parallel, 8);
  ClusterSpec varied = base_problem.cluster;
  varied.device.memory_bandwidth_Bps *= 0.5;
  varied.device.op_overhead_s = 30e-6;
  varied.intra_node.bandwidth_Bps *= 0.25;
  varied.nic.latency_s *= 4;
  PlanningProblem varied_problem = base_problem;
  varied_problem.cluster = varied;
  CostModel afresh(varied_problem);
  CostModel shared = base.with_cluster(varied);
  for (const Prediction& p : plans) {
    const Prediction expected = afresh.evaluate(p.plan, CostModel::PipelineTiming::Replayed);
    const Prediction got = shared.evaluate(p.plan, CostModel::PipelineTiming::Replayed);
    EXPECT_EQ(got.step_s, expected.step_s) << p.plan.describe();
    EXPECT_EQ(got.memory.peak, expected.memory.peak) << p.plan.describe();
    EXPECT_GT(got.step_s, p.step_s) << p.plan.describe();  // every varied figure is worse
  }
}

TEST(PlannerUncertainty, IntervalsOverlapWhenTheyShareAPoint) {
  EXPECT_TRUE(intervals_overlap({1.0, 2.0}, {2.0, 3.0}));
  EXPECT_TRUE(intervals_overlap({1.0, 3.0}, {1.5, 2.0}));
  EXPECT_TRUE(intervals_overlap({1.5, 2.0}, {1.0, 3.0}));
  EXPECT_FALSE(intervals_overlap({1.0, 2.0}, {2.1, 3.0}));
  EXPECT_FALSE(intervals_overlap({2.1, 3.0}, {1.0, 2.0}));
}

// The report says so for a runner-up whose interval reaches into the winner's, and not for one beyond it.
TEST(PlannerUncertainty, TheReportSaysWhenTheRankingIsNotCertain) {
  CostModel model(gpt2_small(launch_overhead_assumed(20e-6)));
  SearchResult result;
  for (int64_t micro_batch : {4, 8, 16}) {
    result.ranked.push_back(model.evaluate(one_device(micro_batch), CostModel::PipelineTiming::Replayed));
  }
  // The figures close the second plan's gap by nothing (they move both alike): its order holds against them.
  StepIntervals intervals{0.1, {}, {{1.0, 1.2}, {1.1, 1.3}, {1.21, 1.4}}, {0.0, 0.0, 0.0}};
  const std::string text = format_report(model, result, 3, &intervals);
  const std::string sentence = "this plan and the winner are within each other's intervals";
  ASSERT_NE(text.find(sentence), std::string::npos) << text;
  EXPECT_EQ(text.find(sentence, text.find(sentence) + 1), std::string::npos) << text;  // the second only
  EXPECT_NE(text.find("[1.000, 1.200] s"), std::string::npos) << text;
  EXPECT_NE(text.find("close the gap of"), std::string::npos) << text;
  StepIntervals reversible = intervals;
  reversible.gap_closing_s[1] = std::fabs(result.ranked[1].step_s - result.ranked[0].step_s) + 1.0;
  EXPECT_NE(format_report(model, result, 3, &reversible).find("can reverse it"), std::string::npos);
  const nlohmann::json json = report_json(model, result, 3, &intervals);
  EXPECT_EQ(json["plans"][0]["step_time_low_s"], 1.0);
  EXPECT_EQ(json["plans"][0]["step_time_high_s"], 1.2);
  EXPECT_FALSE(json["plans"][0].contains("within_winner_interval"));
  EXPECT_EQ(json["plans"][1]["within_winner_interval"], true);
  EXPECT_EQ(json["plans"][1]["order_holds_against_assumed_figures"], true);
  EXPECT_EQ(json["plans"][2]["within_winner_interval"], false);
  EXPECT_EQ(json["uncertainty"]["range"], 0.1);
}

}  // namespace
}  // namespace strata
