// Pipeline parallelism end to end: `mpirun -np N strata train --set parallel.pp=P` against one
// process running the same global batch. A stage runs exactly the ops of its layers and every
// layout accumulates the tied embedding's two uses apart (the LM head reads its own copy), adding
// them once per step, so pipelines alone are bit-identical to one process at any micro-batch count
// (losses, gradient norms, saved parameters and AdamW moments). With tensor parallelism too, sums
// are split and the runs agree to rounding (losses within 1e-5 relative per step).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "parallel/run_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using testing::mpirun;
using testing::shell;

const std::string kOneMicroBatch = "--set train.batch_size=2 --set train.global_batch=2";
const std::string kFourMicroBatches = "--set train.batch_size=2 --set train.global_batch=8";
const std::string kStep20 = "step_00000020";

class PipelineParallelRun : public testing::TrainRunSuite {
 protected:
  static void SetUpTestSuite() {
    set_up_suite("pipeline_parallel", "n_layer = 4\nn_head = 4\nn_embd = 32\nvocab_size = 4099\nblock_size = 16\n");
  }
};

TEST_F(PipelineParallelRun, TwoAndFourStagesWithOneMicroBatchAreBitIdenticalToOneProcess) {
  fs::path single = train("single_m1", "", kOneMicroBatch);
  for (int stages : {2, 4}) {
    fs::path run = train("pp" + std::to_string(stages) + "_m1", mpirun(stages),
                         kOneMicroBatch + " --set parallel.pp=" + std::to_string(stages));
    EXPECT_NE(last_output_.find("pipeline parallel: " + std::to_string(stages) + " stages (1f1b schedule"),
              std::string::npos)
        << last_output_;
    testing::expect_identical_runs(single, run, kStep20, "pp=" + std::to_string(stages));
  }
}

TEST_F(PipelineParallelRun, EverySchedulesPipelineAloneIsBitIdenticalToOneProcessWithFourMicroBatches) {
  fs::path single = train("single_m4", "", kFourMicroBatches);
  for (const auto& [name, ranks, layout] :
       {std::tuple{"pp2_1f1b", 2, "--set parallel.pp=2"}, std::tuple{"pp4_1f1b", 4, "--set parallel.pp=4"},
        std::tuple{"pp2_gpipe", 2, "--set parallel.pp=2 --set parallel.schedule=gpipe"},
        std::tuple{"pp2_interleaved_v2", 2,
                   "--set parallel.pp=2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2"}}) {
    fs::path run = train(name, mpirun(ranks), kFourMicroBatches + " " + layout);
    testing::expect_identical_runs(single, run, kStep20, name);
  }
}

// Data parallelism with two micro-batches per rank adds each rank's sum, not the four in order
// (as dp alone does): parameters within 1e-5. With tensor parallelism every layer's sums are split,
// and 20 AdamW steps (which normalise near-zero gradient elements) grow that rounding to a few 1e-5
// of a tensor's largest value (measured up to 4.7e-5 for tp=2 alone on this model), so 1e-4 there.
TEST_F(PipelineParallelRun, StagesWithDataOrTensorParallelismMatchOneProcessWithFourMicroBatches) {
  fs::path single = train("single_m4_composed", "", kFourMicroBatches);
  for (const auto& [name, ranks, layout, tolerance] :
       {std::tuple{"dp2_pp2", 4, "--set parallel.pp=2 --set parallel.dp=2", 1e-5},
        std::tuple{"tp2_pp2", 4, "--set parallel.pp=2 --set parallel.tp=2", 1e-4},
        std::tuple{"dp2_tp2_pp2", 8, "--set parallel.pp=2 --set parallel.tp=2 --set parallel.dp=2", 1e-4}}) {
    fs::path run = train(name, mpirun(ranks), kFourMicroBatches + " " + layout);
    testing::expect_close_runs(single, run, kStep20, tolerance, name);
  }
}

// ZeRO-1 and 2 over the data-parallel ranks of each stage: the tied embedding has a bucket of its
// own, so a rank's share of it lies alike on the first and the last stage and the two shares are
// summed there; the same arithmetic as ZeRO-0.
TEST_F(PipelineParallelRun, ZeroOneAndTwoWithStagesAreBitIdenticalToZeroZero) {
  // One bucket per stage but for the tied embedding (25 MiB): its offset would differ between the stages.
  const std::string layout = kFourMicroBatches + " --set parallel.pp=2 --set parallel.dp=2";
  fs::path zero0 = train("dp2_pp2_zero0", mpirun(4), layout);
  for (const char* zero : {"1", "2"}) {
    fs::path run = train(std::string("dp2_pp2_zero") + zero, mpirun(4), layout + " --set parallel.zero=" + zero);
    testing::expect_identical_runs(zero0, run, kStep20, std::string("ZeRO-") + zero);
  }
}

// fp16 with a loss scale that overflows: the exact gradient norm is summed over the stages, so every
// stage skips the same steps, as one process does, and the runs stay bit-identical.
TEST_F(PipelineParallelRun, AnOverflowingFp16StepIsSkippedOnEveryStage) {
  const std::string settings = kFourMicroBatches + " --set precision.compute=fp16 --set precision.loss_scale=1e30 "
                               "--set train.steps=3 --set train.val_every=0";
  fs::path single = train("fp16_single", "", settings);
  fs::path pp2 = train("fp16_pp2", mpirun(2), settings + " --set parallel.pp=2");
  testing::expect_same_overflow_skips(single, pp2);
}

TEST_F(PipelineParallelRun, Bf16WithFullRecomputationStaysWithinTwoPercentOfFp32) {
  fs::path fp32 = train("fp32_m4", "", kFourMicroBatches + " --set train.steps=10");
  fs::path bf16 = train("bf16_pp2", mpirun(2), kFourMicroBatches + " --set train.steps=10 --set parallel.pp=2 "
                                                                     "--set precision.compute=bf16 --set train.recompute=full");
  testing::expect_losses_close(fp32, bf16, 0.02, "bf16 pp=2");
}

// Checkpoints hold whole tensors gathered to the first stage, so a run resumes bit-identically
// at its own layout and in one process, and continues with tensor parallelism added (parameters
// within 1e-4 there, as above).
TEST_F(PipelineParallelRun, ResumeContinuesBitIdenticallyAtTheSameLayoutAndInOneProcess) {
  const std::string settings = kFourMicroBatches + " --set checkpoint.every=10 --set checkpoint.keep=0";
  fs::path straight = train("straight_pp2", mpirun(2), settings + " --set parallel.pp=2");
  for (const auto& [name, launcher, layout] :
       {std::tuple{"resumed_pp2", mpirun(2), "--set parallel.pp=2"}, std::tuple{"resumed_pp1", std::string(), ""},
        std::tuple{"resumed_tp2_pp2", mpirun(4), "--set parallel.pp=2 --set parallel.tp=2"}}) {
    fs::path resumed = copy_after_step_10(straight, name);
    train(name, launcher, settings + " --set checkpoint.resume=true " + layout);
    if (std::string(name) != "resumed_tp2_pp2") {
      testing::expect_identical_runs(straight, resumed, kStep20, name);
    } else {
      testing::expect_close_runs(straight, resumed, kStep20, 1e-4, name);
    }
  }
}

TEST_F(PipelineParallelRun, PipelinesThatCannotRunAreErrorsNamingTheKeys) {
  const std::string base = STRATA_EXECUTABLE + std::string(" train ") + config() + " --set checkpoint.dir=" +
                           (root() / "bad").string() + " ";
  auto expect_refused = [&](const std::string& launch, const std::string& text) {
    testing::LaunchResult run = shell(launch);
    EXPECT_NE(run.exit_code, 0) << launch;
    EXPECT_NE(run.output.find(text), std::string::npos) << run.output;
  };
  expect_refused(mpirun(2) + base + "--set parallel.pp=8",
                 "key 'parallel.pp' (8) exceeds model.n_layer (4): every pipeline stage needs at least one layer");
  expect_refused(mpirun(2) + base + "--set parallel.pp=2 --set parallel.schedule=interleaved "
                 "--set parallel.virtual_stages=2 --set train.batch_size=2 --set train.global_batch=6",
                 "runs micro-batches in groups of parallel.pp (2), but a step has 3");
  expect_refused(mpirun(2) + base + "--set parallel.pp=2 --set parallel.schedule=interleaved "
                 "--set parallel.virtual_stages=4",
                 "parallel.pp (2) × parallel.virtual_stages (4) = 8 pipeline parts, but model.n_layer is 4");
  expect_refused(mpirun(2) + base + "--set parallel.pp=2 --set parallel.virtual_stages=2",
                 "key 'parallel.virtual_stages' is 2 but parallel.schedule is \"1f1b\"");
  expect_refused(mpirun(2) + base + "--set parallel.pp=2 --set parallel.schedule=zb",
                 "key 'parallel.schedule': pipeline schedule must be gpipe, 1f1b or interleaved, got 'zb'");
  expect_refused(mpirun(3) + base + "--set parallel.pp=2",
                 "keys 'parallel.tp' (1) and 'parallel.pp' (2): their product must divide the 3 ranks launched");
  expect_refused(base + "--set parallel.pp=2", "key 'parallel.pp' is 2 but this is one process");
  EXPECT_FALSE(fs::exists(root() / "bad" / "metrics.jsonl"));
}

}  // namespace
}  // namespace strata
