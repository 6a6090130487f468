// Expert parallelism through the real executable: `mpirun -np N strata train --set parallel.ep=2`
// (alone, with data, tensor and pipeline parallelism, under ZeRO-1) against one process running the
// same global batch of a Mixtral-shaped model (4 layers, 4 experts, top-2, dropless, both router
// losses weighted). Each expert-parallel rank runs its own micro-batches and holds half the experts;
// tokens reach their experts through the dispatch exchange and come back through the return exchange.
// The per-token arithmetic is one process's, but the experts' weight gradients add the rows of both
// ranks in another order, so runs agree to rounding: the bound, 1e-5 relative, on every
// step's loss, validation loss and router figures. The saved parameters agree within 1e-4 of each
// tensor's largest element: on this model any reordering of the sums does no better (tp=2 × dp=2
// without experts differs by 1.7e-5 after 10 steps: Adam's normalised steps enlarge the rounding of
// gradients that nearly cancel), while a real error moves them by the learning rate. A checkpoint
// saved at ep=2 resumes at ep=1 and ep=4 (and converts offline) within the same bounds.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>

#include "parallel/run_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using testing::mpirun;

// One row per micro-batch, 4 per step, so 1, 2 and 4 ranks split a step evenly; 3 validation batches
// do not: the ranks with fewer make an extra pass, since the exchange needs every rank.
const std::string kSettings =
    "--set train.steps=10 --set train.batch_size=1 --set train.global_batch=4 --set train.val_every=5 "
    "--set train.val_batches=3";
const std::string kStep10 = "step_00000010";
constexpr double kLossTolerance = 1e-5;
constexpr double kParameterTolerance = 1e-4;

class ExpertParallelRun : public testing::TrainRunSuite {
 protected:
  static void SetUpTestSuite() {
    set_up_suite("expert_parallel",
                 "family = \"mixtral\"\nn_layer = 4\nn_head = 4\nn_kv_head = 2\nn_embd = 32\nnum_experts = 4\n"
                 "num_experts_per_tok = 2\nmoe_intermediate_size = 16\nrouter_aux_loss_coef = 0.05\n"
                 "router_z_loss_coef = 0.01\nvocab_size = 4099\nblock_size = 16\ntie_word_embeddings = false\n");
  }

  void expect_matches(const fs::path& single, const fs::path& run, const std::string& what) {
    testing::expect_close_runs(single, run, kStep10, kParameterTolerance, what);
    testing::expect_router_metrics(single, run, kLossTolerance, what);
  }
};

TEST_F(ExpertParallelRun, TwoRanksMatchOneProcessAndSplitTheExpertsGradientsOverTheirReplicasOnly) {
  const fs::path single = train("single", "", kSettings);
  const fs::path ep2 = train("ep2", mpirun(2), kSettings + " --set parallel.ep=2");
  // The dense layers' gradients are summed over both ranks, the experts' over none (each rank holds its own).
  EXPECT_NE(last_output_.find("over ep+dp: gradients all-reduced"), std::string::npos) << last_output_;
  EXPECT_NE(last_output_.find("over dp: gradients kept whole"), std::string::npos) << last_output_;
  expect_matches(single, ep2, "ep2");
}

TEST_F(ExpertParallelRun, ComposesWithDataTensorAndPipelineParallelismAndZero) {
  const fs::path single = train("single_layouts", "", kSettings);
  for (const auto& [name, layout] :
       {std::tuple{"ep2_dp2", "--set parallel.ep=2 --set parallel.dp=2"},
        std::tuple{"ep2_dp2_zero1", "--set parallel.ep=2 --set parallel.dp=2 --set parallel.zero=1"},
        std::tuple{"ep2_tp2", "--set parallel.ep=2 --set parallel.tp=2"},
        std::tuple{"ep2_tp2_sp", "--set parallel.ep=2 --set parallel.tp=2 --set parallel.sp=true"},
        std::tuple{"ep2_pp2", "--set parallel.ep=2 --set parallel.pp=2"},
        std::tuple{"ep4", "--set parallel.ep=4"}}) {
    const fs::path run = train(name, mpirun(4), kSettings + " " + layout);
    expect_matches(single, run, name);
    if (std::string(name) == "ep2_dp2_zero1") {
      // ZeRO splits the dense layers' state over all 4 ranks, each expert's over its 2 replicas.
      EXPECT_NE(last_output_.find("over ep+dp: gradients reduce-scattered"), std::string::npos) << last_output_;
      EXPECT_NE(last_output_.find("over dp: gradients reduce-scattered"), std::string::npos) << last_output_;
    }
  }
}

// A run directory `name` holding `straight`'s checkpoint of step 5 as `latest`, with its first 5
// lines of metrics.jsonl, to resume from.
fs::path resume_point_at_step_5(const fs::path& straight, const fs::path& root, const std::string& name) {
  const fs::path resumed = root / name;
  fs::create_directories(resumed);
  fs::copy(straight / "step_00000005", resumed / "step_00000005", fs::copy_options::recursive);
  std::ofstream(resumed / "latest") << "step_00000005";
  std::ofstream log(resumed / "metrics.jsonl");
  const std::vector<nlohmann::json> lines = testing::read_metrics(straight);
  for (size_t i = 0; i < 5 && i < lines.size(); ++i) log << lines[i].dump() << "\n";
  return resumed;
}

TEST_F(ExpertParallelRun, ACheckpointSavedAtTwoRanksResumesAtOneAndFourAndConvertsOffline) {
  const std::string saving = kSettings + " --set checkpoint.every=5 --set checkpoint.keep=0";
  const fs::path straight = train("ep2_straight", mpirun(2), saving + " --set parallel.ep=2");
  for (const auto& [name, launcher, layout] :
       {std::tuple{"resumed_ep1", std::string(), ""}, std::tuple{"resumed_ep4", mpirun(4), " --set parallel.ep=4"}}) {
    resume_point_at_step_5(straight, root(), name);
    const fs::path resumed = train(name, launcher, saving + " --set checkpoint.resume=true" + layout);
    EXPECT_NE(last_output_.find("resumed from"), std::string::npos) << last_output_;
    expect_matches(straight, resumed, name);
  }
  // Offline: ep=2's step 5 rewritten as one process saves it, then resumed there.
  const fs::path converted = root() / "converted_ep1";
  const testing::LaunchResult convert = testing::shell(std::string(STRATA_EXECUTABLE) + " ckpt convert " +
                                                       (straight / "step_00000005").string() + " " +
                                                       converted.string() + " --layout dp=1,tp=1,pp=1,ep=1");
  ASSERT_EQ(convert.exit_code, 0) << convert.output;
  std::ofstream log(converted / "metrics.jsonl");
  const std::vector<nlohmann::json> lines = testing::read_metrics(straight);
  for (size_t i = 0; i < 5; ++i) log << lines[i].dump() << "\n";
  log.close();
  train("converted_ep1", "", saving + " --set checkpoint.resume=true");
  expect_matches(straight, converted, "converted_ep1");
}

TEST_F(ExpertParallelRun, RefusesADegreeThatDoesNotSplitTheExpertsOrADenseModel) {
  const testing::LaunchResult uneven = testing::shell(mpirun(3) + STRATA_EXECUTABLE + " train " + config() +
                                                      " --set checkpoint.dir=" + (root() / "ep3").string() + " " +
                                                      kSettings + " --set train.global_batch=3 --set parallel.ep=3");
  EXPECT_NE(uneven.exit_code, 0);
  EXPECT_NE(uneven.output.find("key 'parallel.ep' (3) must divide model.num_experts (4)"), std::string::npos)
      << uneven.output;
  // The suite's data and training settings under a dense GPT-2.
  std::ifstream suite(config());
  const std::string text((std::istreambuf_iterator<char>(suite)), std::istreambuf_iterator<char>());
  const fs::path dense_config = root() / "dense.toml";
  std::ofstream(dense_config) << "[model]\nn_layer = 1\nn_head = 2\nn_embd = 32\nvocab_size = 4099\nblock_size = 16\n"
                              << text.substr(text.find("[data]"));
  const testing::LaunchResult dense = testing::shell(mpirun(2) + STRATA_EXECUTABLE + " train " + dense_config.string() +
                                                     " --set checkpoint.dir=" + (root() / "dense").string() + " " +
                                                     kSettings + " --set parallel.ep=2");
  EXPECT_NE(dense.exit_code, 0);
  EXPECT_NE(dense.output.find("key 'parallel.ep' (2) needs a mixture-of-experts model"), std::string::npos)
      << dense.output;
}

}  // namespace
}  // namespace strata
