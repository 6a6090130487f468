// `strata train --trace`: the timeline a training run writes (every kernel with its op, label,
// shapes, dtype, FLOPs and bytes; data, optimizer, checkpoint and step spans), the steps it
// covers, and the gap analysis that splits each step's time into parts adding up to it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/json_file.h"
#include "core/trace_analysis.h"
#include "support/error_text.h"
#include "support/trace_checks.h"
#include "tiny_training_test.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using TraceTest = testing::TinyTrainingTest;

std::vector<nlohmann::json> metrics_lines(const fs::path& run) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

TEST_F(TraceTest, ARunWritesAWellFormedNestedTimelineOfEveryStep) {
  const fs::path file = root() / "all.json";
  {
    Trainer trainer(config("trace_all"));
    trainer.enable_tracing({.path = file.string()});
    trainer.run();
  }
  nlohmann::json trace = read_json_file(file);
  testing::expect_well_formed_trace(trace);
  testing::expect_spans_nest(trace);
  EXPECT_EQ(testing::trace_processes(trace), (std::map<int, std::string>{{0, "rank 0"}}));

  std::map<std::string, int> categories;
  for (const nlohmann::json& event : testing::trace_spans(trace)) ++categories[event["cat"]];
  for (const char* category : {"step", "kernel", "graph", "data", "optimizer", "validation", "checkpoint"}) {
    EXPECT_GT(categories[category], 0) << category;
  }
  EXPECT_EQ(categories["step"], 6);
  // Graph kernels carry what they computed.
  int graph_kernels = 0;
  for (const nlohmann::json& kernel : testing::trace_spans(trace, "kernel")) {
    if (!kernel.contains("args") || !kernel["args"].contains("node")) continue;
    ++graph_kernels;
    for (const char* key : {"label", "dtype", "inputs", "outputs", "flops", "bytes", "graph", "route"}) {
      ASSERT_TRUE(kernel["args"].contains(key)) << key << " in " << kernel.dump();
    }
    if (kernel["name"] == "matmul") {
      EXPECT_GT(kernel["args"]["flops"].get<double>(), 0) << kernel.dump();
    }
  }
  EXPECT_GT(graph_kernels, 6 * 2 * 20);  // 6 steps of 2 micro-batches of a graph of many nodes

  // The gap analysis: one row per step, its parts adding up to the step, the step as measured.
  std::vector<trace::StepGaps> steps = trace::analyse_steps(trace);
  ASSERT_EQ(steps.size(), 6u);
  std::vector<nlohmann::json> metrics = metrics_lines(root() / "trace_all");
  ASSERT_EQ(metrics.size(), 6u);
  for (size_t i = 0; i < steps.size(); ++i) {
    const trace::StepGaps& gaps = steps[i];
    EXPECT_EQ(gaps.step, static_cast<int64_t>(i + 1));
    double sum = 0;
    for (double ms : gaps.ms) {
      EXPECT_GE(ms, 0.0);
      sum += ms;
    }
    EXPECT_NEAR(sum, gaps.step_ms, 0.05 * gaps.step_ms) << "step " << gaps.step;
    // The step span is the step the trainer measures (tokens / tokens_per_s).
    const double measured_ms = 1e3 * metrics[i]["tokens"].get<double>() / static_cast<double>(i + 1) /
                               metrics[i]["tokens_per_s"].get<double>();
    // (20 us more for a preemption between the two clock readings: these steps take well under a millisecond.)
    EXPECT_NEAR(gaps.step_ms, measured_ms, 0.05 * measured_ms + 0.02) << "step " << gaps.step;
    EXPECT_GT(gaps.ms[4], 0.0) << "compute, step " << gaps.step;
    EXPECT_GT(gaps.ms[3], 0.0) << "optimizer, step " << gaps.step;
    EXPECT_GT(gaps.ms[2], 0.0) << "data, step " << gaps.step;
    EXPECT_FALSE(gaps.top_ops.empty());
  }
  // The side file holds the same analysis.
  nlohmann::json gaps = read_json_file(root() / "all.gaps.json");
  EXPECT_EQ(gaps["steps"].size(), 6u);
}

TEST_F(TraceTest, TraceStepsNamesTheStepsRecorded) {
  const fs::path file = root() / "some.json";
  {
    TraceOptions options = parse_trace_steps("2:4");
    options.path = file.string();
    Trainer trainer(config("trace_some"));
    trainer.enable_tracing(options);
    trainer.run();
  }
  nlohmann::json trace = read_json_file(file);
  testing::expect_well_formed_trace(trace);
  testing::expect_spans_nest(trace);
  std::set<int64_t> steps;
  for (const nlohmann::json& step : testing::trace_spans(trace, "step")) steps.insert(step["args"]["step"].get<int64_t>());
  EXPECT_EQ(steps, (std::set<int64_t>{2, 3}));
  // Step 3's validation follows it and is recorded; step 6's checkpoint save is not.
  EXPECT_EQ(testing::trace_spans(trace, "validation").size(), 1u);
  EXPECT_TRUE(testing::trace_spans(trace, "checkpoint").empty());
}

TEST_F(TraceTest, TraceStepRangesParseOrFailNamingTheFlag) {
  TraceOptions range = parse_trace_steps("3:7");
  EXPECT_EQ(range.first_step, 3);
  EXPECT_EQ(range.end_step, 7);
  EXPECT_FALSE(range.includes(2));
  EXPECT_TRUE(range.includes(3));
  EXPECT_TRUE(range.includes(6));
  EXPECT_FALSE(range.includes(7));
  TraceOptions open = parse_trace_steps("5:");
  EXPECT_TRUE(open.includes(1000));
  EXPECT_FALSE(open.includes(4));
  TraceOptions one = parse_trace_steps("4");
  EXPECT_TRUE(one.includes(4));
  EXPECT_FALSE(one.includes(5));
  EXPECT_TRUE(TraceOptions{}.includes(1));
  for (const char* bad : {"0:3", "4:4", "5:2", "a:b", "1:2:3", ""}) {
    EXPECT_THROW(parse_trace_steps(bad), Error) << bad;
  }
  EXPECT_NE(testing::error_of([] { parse_trace_steps("5:2"); }).find("--trace-steps"), std::string::npos);
}

TEST_F(TraceTest, WithoutTraceNothingIsRecorded) {
  Trainer trainer(config("untraced"));
  trainer.step();
  EXPECT_EQ(trace::active(), nullptr);
  EXPECT_TRUE(trainer.finish_trace().is_null());
}

}  // namespace
}  // namespace strata
