// The trainer's plan of a mixture of experts: a configured parallel.ep reaches the plan it records and
// predicts, and parallel.plan = "auto" writes the planner's ep into the config it runs.
#include <gtest/gtest.h>

#include <string>

#include "train/auto_parallel.h"

namespace strata {
namespace {

const std::string kMixtral = std::string(STRATA_SOURCE_DIR) + "/configs/mixtral_small.toml";

TEST(AutoParallel, ManualPlanCarriesTheConfiguredExpertParallelism) {
  const TrainConfig config =
      load_train_config(kMixtral, {"parallel.ep=2", "parallel.cluster=this-machine", "train.batch_size=4"});
  const MeshShape mesh = config.mesh_for(4);  // dp = 2 of the 4 ranks left by ep = 2
  const AppliedPlan applied = describe_manual_plan(config, mesh, 1);
  // 32 rows per step in micro-batches of 4 over dp x ep = 4 replicas: 2 each.
  EXPECT_EQ(applied.plan.chosen.plan.describe(), "dp=2 tp=1 pp=1 ep=2 mb=4x2 zero=0 recompute=none");
  EXPECT_EQ(applied.plan.record["chosen"]["plan"]["ep"], 2);
  EXPECT_GT(applied.plan.chosen.time.comm["ep"], 0.0);
}

TEST(AutoParallel, AutoLayoutWritesTheChosenDegreesExpertsIncluded) {
  TrainConfig config = load_train_config(kMixtral, {"parallel.plan=auto", "parallel.cluster=this-machine"});
  choose_auto_layout(config, 4, 1);
  EXPECT_EQ(config.dp * config.tp * config.pp * config.ep, 4);
  EXPECT_EQ(8 % config.ep, 0);
  EXPECT_TRUE(!config.sp || config.tp > 1);  // sequence parallelism (the router's gathers priced) needs tp
  EXPECT_EQ(config.mesh_for(4).degree("ep"), config.ep);
}

}  // namespace
}  // namespace strata
