// The trainer's entry point: choose a plan under the run's limits, record it,
// and add the measured step time afterwards.
#include "planner/auto_plan.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"
#include "planner_test_support.h"

namespace strata {
namespace {

TEST(PlannerAutoPlan, ChoosesWithinTheRunsLimitsAndRecordsIt) {
  AutoPlanRequest request;
  request.model_name = "small";
  request.model.n_layer = 2;
  request.model.n_head = 4;
  request.model.n_embd = 128;
  request.model.vocab_size = 512;
  request.model.block_size = 64;
  request.global_batch = 32;
  request.seq = 64;
  request.cluster = testing::test_cluster(1, 1, 8);
  request.limits.recompute = RecomputeMode::None;
  request.limits.max_micro_batch = 8;
  AutoPlan plan = auto_plan(request);
  EXPECT_EQ(plan.chosen.plan.devices(), 1);
  EXPECT_LE(plan.chosen.plan.micro_batch, 8);
  EXPECT_EQ(plan.chosen.plan.micro_batch * plan.chosen.plan.micro_batches, 32);

  auto run_dir = std::filesystem::temp_directory_path() / "strata_auto_plan_test";
  std::filesystem::remove_all(run_dir);
  write_plan_record(run_dir, plan);
  record_measured_step(run_dir, 2 * plan.chosen.step_s, 10);
  auto record = nlohmann::json::parse(read_text_file(run_dir / "plan.json"));
  std::filesystem::remove_all(run_dir);
  EXPECT_EQ(record["chosen"]["plan"]["micro_batch"], plan.chosen.plan.micro_batch);
  EXPECT_DOUBLE_EQ(record["chosen"]["step_s"].get<double>(), plan.chosen.step_s);
  EXPECT_DOUBLE_EQ(record["measured"]["predicted_over_measured"].get<double>(), 0.5);
}

TEST(PlannerAutoPlan, FailsWithTheReasonWhenNothingFits) {
  AutoPlanRequest request;
  request.model.n_layer = 48;
  request.model.n_head = 25;
  request.model.n_embd = 1600;
  request.model.vocab_size = 50257;
  request.model.block_size = 1024;
  request.global_batch = 8;
  request.seq = 1024;
  request.cluster = testing::test_cluster(1, 1, 4);  // 1.5B parameters need 25 GB of state alone
  try {
    auto_plan(request);
    ADD_FAILURE() << "a 1.5B model fitted into 4 GiB";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("do not fit in device memory"), std::string::npos) << error.what();
  }
}

TEST(PlannerAutoPlan, ResolvesPresetNames) {
  ClusterSpec cluster = resolve_cluster("this-machine");
  EXPECT_EQ(cluster.devices_per_node, 2);
  EXPECT_THROW(resolve_cluster("no-such-cluster"), Error);
}

}  // namespace
}  // namespace strata
