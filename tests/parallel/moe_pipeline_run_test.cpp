// A mixture of experts under pipeline parallelism, through the real executable: `mpirun -np N strata
// train --set parallel.pp=2` (1F1B, GPipe, interleaved with 2 chunks per stage; with dp=2) against one process
// running the same global batch. A Mixtral-shaped model (4 layers, 4 experts, top-2, dropless) with
// both router losses weighted: transformers' load-balancing loss is taken over every layer's routing
// at once, so its running sums cross each stage boundary with the activation and their gradients come
// back. A stage runs exactly the ops of its layers in one process's order, so pipelines alone are the
// same bits (the bound is 1e-5 relative): losses, gradient norms, validation losses, the saved
// parameters and moments, and every router figure in metrics.jsonl, which the last stage tallies.
// With data parallelism too, within 1e-5.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <tuple>

#include "parallel/run_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using testing::mpirun;

// 10 steps of 4 micro-batches: validation at step 10 passes the boundary values through the eval graphs too.
const std::string kSettings = "--set train.steps=10 --set train.batch_size=2 --set train.global_batch=8";
const std::string kStep10 = "step_00000010";

class MoePipelineRun : public testing::TrainRunSuite {
 protected:
  static void SetUpTestSuite() {
    set_up_suite("moe_pipeline",
                 "family = \"mixtral\"\nn_layer = 4\nn_head = 4\nn_kv_head = 2\nn_embd = 32\nnum_experts = 4\n"
                 "num_experts_per_tok = 2\nmoe_intermediate_size = 16\nrouter_aux_loss_coef = 0.05\n"
                 "router_z_loss_coef = 0.01\nvocab_size = 4099\nblock_size = 16\ntie_word_embeddings = false\n");
  }
};

TEST_F(MoePipelineRun, EverySchedulesTwoStagesAreBitIdenticalToOneProcessWithTheRouterLosses) {
  const fs::path single = train("single", "", kSettings);
  const std::vector<nlohmann::json> lines = testing::read_metrics(single);
  ASSERT_FALSE(lines.empty());
  ASSERT_GT(lines.front().value("router_aux_loss", 0.0), 0.0) << lines.front().dump();
  for (const auto& [name, layout] :
       {std::tuple{"pp2_1f1b", "--set parallel.pp=2"},
        std::tuple{"pp2_gpipe", "--set parallel.pp=2 --set parallel.schedule=gpipe"},
        std::tuple{"pp2_interleaved_v2",
                   "--set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2"}}) {
    const fs::path run = train(name, mpirun(2), kSettings + " " + layout);
    EXPECT_NE(last_output_.find("pipeline parallel: 2 stages"), std::string::npos) << last_output_;
    testing::expect_identical_runs(single, run, kStep10, name);
    testing::expect_router_metrics(single, run, 0.0, name);
  }
}

// Each stage's data-parallel ranks run half the micro-batches: the last stage's two ranks gather the
// router losses in the micro-batches' order and sum the counts; the gradients' sums are split, so the
// runs agree to rounding.
TEST_F(MoePipelineRun, StagesWithDataParallelismMatchOneProcessWithTheRouterFigures) {
  const fs::path single = train("single_dp", "", kSettings);
  const fs::path run = train("dp2_pp2", mpirun(4), kSettings + " --set parallel.pp=2 --set parallel.dp=2");
  testing::expect_close_runs(single, run, kStep10, 1e-5, "dp2_pp2");
  testing::expect_router_metrics(single, run, 1e-5, "dp2_pp2");
}

}  // namespace
}  // namespace strata
