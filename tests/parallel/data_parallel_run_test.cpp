// Data parallelism end to end: `mpirun -np D strata train` against one process
// running the same global batch with gradient accumulation (the reference),
// compared on the per-step losses of metrics.jsonl and the saved parameters
// and AdamW moments.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "parallel/run_support.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

using testing::expect_identical_runs;
using testing::LaunchResult;
using testing::mpirun;
using testing::shell;

class DataParallelRun : public testing::TrainRunSuite {
 protected:
  static void SetUpTestSuite() {
    set_up_suite("data_parallel", "n_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 321\nblock_size = 16\n");
  }

  static std::vector<nlohmann::json> metrics(const fs::path& run_dir) { return testing::read_metrics(run_dir); }
};

const std::string kTwoMicroBatches = "--set train.batch_size=2 --set train.global_batch=4";

TEST_F(DataParallelRun, TwoRanksAreBitIdenticalToOneProcessAccumulatingTwoMicroBatches) {
  fs::path single = train("single_fp32", "", kTwoMicroBatches);
  fs::path dp2 = train("dp2_fp32", mpirun(2), kTwoMicroBatches);
  expect_identical_runs(single, dp2, "step_00000020");
}

TEST_F(DataParallelRun, SeveralGradientBucketsAndBf16StayBitIdentical) {
  // 0.004 MiB buckets: the 2-layer model's gradients take several.
  std::string settings = kTwoMicroBatches + " --set parallel.bucket_mb=0.004 --set precision.compute=bf16";
  fs::path single = train("single_bf16", "", settings);
  fs::path dp2 = train("dp2_bf16", mpirun(2), settings);
  EXPECT_NE(last_output_.find(" bucket(s) of up to"), std::string::npos) << last_output_;
  EXPECT_EQ(last_output_.find("; 1 bucket(s)"), std::string::npos) << last_output_;
  expect_identical_runs(single, dp2, "step_00000020");
}

// Each rank owns a device (here two processes share PoCL's): buckets are all-reduced through host
// copies, which add the same f32 values in the same order as one process accumulating on the device.
TEST_F(DataParallelRun, TwoRanksOnOpenCLAreBitIdenticalToOneProcessOnTheDevice) {
  const std::string settings = kTwoMicroBatches + " --set ops.backend=opencl --set parallel.bucket_mb=0.004";
  fs::path single = train("single_opencl", "", settings);
  fs::path dp2 = train("dp2_opencl", mpirun(2), settings);
  EXPECT_EQ(last_output_.find("; 1 bucket(s)"), std::string::npos) << last_output_;
  expect_identical_runs(single, dp2, "step_00000020");
}

// Per-rank accumulation and a different summation order round differently:
// losses within 1e-6 relative per step, parameters within 1e-5 of each tensor's largest value.
TEST_F(DataParallelRun, ThreeAndFourRanksAgreeWithOneProcessWithinTolerance) {
  const std::string settings = "--set train.batch_size=1 --set train.global_batch=12";
  fs::path single = train("single_12", "", settings);
  for (int ranks : {3, 4}) {
    fs::path parallel = train("dp" + std::to_string(ranks) + "_12", mpirun(ranks), settings);
    std::vector<nlohmann::json> expected = metrics(single), got = metrics(parallel);
    ASSERT_EQ(expected.size(), got.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      double a = expected[i]["loss"], b = got[i]["loss"];
      EXPECT_LE(std::abs(a - b), 1e-6 * std::abs(a)) << ranks << " ranks, step " << i + 1;
    }
    testing::expect_parameters_close(single / "step_00000020", parallel / "step_00000020", 1e-5,
                                     std::to_string(ranks) + " ranks");
  }
}

TEST_F(DataParallelRun, ResumeContinuesBitIdenticallyWithTheSameOrAnotherDegree) {
  const std::string settings = kTwoMicroBatches + " --set checkpoint.every=10 --set checkpoint.keep=0";
  fs::path straight = train("straight", mpirun(2), settings);
  for (auto [name, launcher] : {std::pair{"resumed_dp2", mpirun(2)}, std::pair{"resumed_dp1", std::string()}}) {
    fs::path resumed = copy_after_step_10(straight, name);
    train(name, launcher, settings + " --set checkpoint.resume=true");
    expect_identical_runs(straight, resumed, "step_00000020");
  }
}

// The figure after `label` in a run's start-up line ("optimizer state 0.14 MiB").
double mib_after(const std::string& output, const std::string& label) {
  auto at = output.find(label + " ");
  return at == std::string::npos ? -1.0 : std::stod(output.substr(at + label.size() + 1));
}

// ZeRO-1 and ZeRO-2 reduce-scatter the buckets and split AdamW's moments and update over the
// ranks, then all-gather the parameters; the gradient norm is summed exactly from the shards. The
// same arithmetic on the same elements, so bit-identical to ZeRO-0, with several buckets (padded
// when a bucket does not divide by the ranks), in fp32 and bf16. One micro-batch per rank: ZeRO-2
// keeps no whole gradient buffers.
TEST_F(DataParallelRun, ZeroOneAndTwoAreBitIdenticalToZeroZeroAndCutStateAndGradientsAtTwoRanks) {
  for (const char* precision : {"fp32", "bf16"}) {
    std::string settings = kTwoMicroBatches + " --set parallel.bucket_mb=0.004 --set precision.compute=" + precision;
    fs::path zero0 = train(std::string("zero0_") + precision, mpirun(2), settings);
    const std::string zero0_output = last_output_;
    fs::path zero1 = train(std::string("zero1_") + precision, mpirun(2), settings + " --set parallel.zero=1");
    const std::string zero1_output = last_output_;
    fs::path zero2 = train(std::string("zero2_") + precision, mpirun(2), settings + " --set parallel.zero=2");
    expect_identical_runs(zero0, zero1, "step_00000020");
    expect_identical_runs(zero0, zero2, "step_00000020");
    EXPECT_NEAR(mib_after(zero1_output, "optimizer state"), mib_after(zero0_output, "optimizer state") / 2, 0.01);
    EXPECT_NEAR(mib_after(last_output_, "optimizer state"), mib_after(zero0_output, "optimizer state") / 2, 0.01);
    // ZeRO-1 keeps whole gradients plus the reduced half; ZeRO-2 only staging buffers and the half.
    EXPECT_NE(last_output_.find("only this rank's blocks kept"), std::string::npos) << last_output_;
    EXPECT_NEAR(mib_after(zero1_output, "gradient buffers"), 1.5 * mib_after(zero0_output, "gradient buffers"), 0.01);
    EXPECT_LT(mib_after(last_output_, "gradient buffers"), mib_after(zero1_output, "gradient buffers"));
  }
}

// The model has 36512 parameters (vocab_size 321): not a multiple of 3. Two micro-batches per
// rank: ZeRO-2 accumulates them in whole buffers before the reduce-scatter.
TEST_F(DataParallelRun, ZeroOneAndTwoAtThreeRanksMatchZeroZeroAndResumeBitIdentically) {
  const std::string settings = "--set train.batch_size=1 --set train.global_batch=6 --set parallel.bucket_mb=0.004 "
                               "--set checkpoint.every=10 --set checkpoint.keep=0";
  fs::path zero0 = train("zero0_dp3", mpirun(3), settings);
  fs::path zero1 = train("zero1_dp3", mpirun(3), settings + " --set parallel.zero=1");
  expect_identical_runs(zero0, zero1, "step_00000020");
  fs::path zero2 = train("zero2_dp3", mpirun(3), settings + " --set parallel.zero=2");
  EXPECT_NE(last_output_.find("whole local accumulators"), std::string::npos) << last_output_;
  expect_identical_runs(zero0, zero2, "step_00000020");
  fs::path resumed = root() / "zero2_dp3_resumed";
  fs::create_directories(resumed);
  fs::copy(zero2 / "step_00000010", resumed / "step_00000010", fs::copy_options::recursive);
  std::ofstream(resumed / "latest") << "step_00000010";
  train("zero2_dp3_resumed", mpirun(3), settings + " --set parallel.zero=2 --set checkpoint.resume=true");
  testing::expect_same_tensors(zero2 / "step_00000020", resumed / "step_00000020", "ZeRO-2 resumed");
}

// Four ranks, one micro-batch each, bf16: ZeRO-2 through staging buffers matches ZeRO-0, whose
// sums at more than two ranks are the same reduce-scatter followed by an all-gather.
TEST_F(DataParallelRun, ZeroTwoStagedAtFourRanksMatchesZeroZero) {
  const std::string settings = "--set train.batch_size=1 --set train.global_batch=4 --set parallel.bucket_mb=0.004 "
                               "--set precision.compute=bf16 --set train.steps=10 --set train.val_every=5";
  fs::path zero0 = train("zero0_dp4", mpirun(4), settings);
  EXPECT_NE(last_output_.find("reduce-scattered then all-gathered"), std::string::npos) << last_output_;
  fs::path zero2 = train("zero2_dp4", mpirun(4), settings + " --set parallel.zero=2");
  EXPECT_NE(last_output_.find("only this rank's blocks kept"), std::string::npos) << last_output_;
  expect_identical_runs(zero0, zero2, "step_00000010");
}

// fp16 with a loss scale that overflows: every rank skips the same steps, as one process does
// (ZeRO-2: each rank sees only its shard of the gradients, the exact norm's infinity is global).
TEST_F(DataParallelRun, AnOverflowingFp16StepIsSkippedOnEveryRank) {
  const std::string settings = kTwoMicroBatches + " --set precision.compute=fp16 --set precision.loss_scale=1e30 "
                               "--set train.steps=3 --set train.val_every=0";
  fs::path single = train("fp16_single", "", settings);
  fs::path dp2 = train("fp16_dp2", mpirun(2), settings + " --set parallel.zero=2");
  testing::expect_same_overflow_skips(single, dp2);
}

// A mixture-of-experts model's router figures (metrics.jsonl) over a step's micro-batches on every rank:
// the same as one process's accumulating both micro-batches, each of the 2 ranks running one.
TEST_F(DataParallelRun, RouterFiguresCoverEveryRanksMicroBatches) {
  const std::string settings =
      "--set train.batch_size=2 --set train.global_batch=4 --set train.steps=4 --set train.val_every=0 "
      "--set model.family=mixtral --set model.n_kv_head=1 --set model.num_experts=4 --set model.num_experts_per_tok=2 "
      "--set model.moe_intermediate_size=16 --set model.tie_word_embeddings=false --set model.capacity_factor=0.75";
  fs::path single = train("moe_single", "", settings);
  fs::path dp2 = train("moe_dp2", mpirun(2), settings);
  expect_identical_runs(single, dp2, "step_00000004");
  const std::vector<nlohmann::json> want = metrics(single), got = metrics(dp2);
  ASSERT_EQ(want.size(), 4u);
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < want.size(); ++i) {
    // 4 rows of 16 tokens, each to 2 experts in 2 layers, over 4 experts.
    EXPECT_EQ(want[i].at("expert_tokens_mean").get<double>(), 4 * 16 * 2 * 2 / 4.0);
    EXPECT_GT(want[i].at("expert_tokens_dropped").get<int64_t>(), 0);  // 24 rows for 32 assignments on average
    for (const char* key : {"router_aux_loss", "router_z_loss", "expert_tokens_min", "expert_tokens_max",
                            "expert_tokens_mean", "expert_tokens_dropped"}) {
      EXPECT_EQ(want[i].at(key).dump(), got[i].at(key).dump()) << key << " at step " << i + 1;
    }
  }
}

// A scheduler's SIGTERM reaching one rank only: every rank stops after the same step, the
// checkpoint of that step is saved, and the job ends with 128 + SIGTERM.
TEST_F(DataParallelRun, SigtermToOneRankStopsEveryRankAfterTheSameStepWithACheckpoint) {
  fs::path run_dir = root() / "preempted";
  std::string launch = mpirun(2) + STRATA_EXECUTABLE + " train " + (root() / "tiny.toml").string() +
                       " --set checkpoint.dir=" + run_dir.string() + " " + kTwoMicroBatches +
                       " --set train.steps=1000000 --set train.val_every=0";
  std::string metrics_file = (run_dir / "metrics.jsonl").string();
  std::string script = "(" + launch + " > " + (root() / "preempted.log").string() + " 2>&1; echo exit=$?) & " +
                       "for i in $(seq 300); do [ \"$(wc -l < " + metrics_file + " 2>/dev/null)\" -ge 3 ] && break; "
                       "sleep 0.1; done; "
                       "victim=$(pgrep -f 'checkpoint.dir=" + run_dir.string() + "' -a | grep -v mpirun | "
                       "grep -v 'bash -c' | tail -1 | cut -d' ' -f1); kill -TERM $victim; wait; "
                       "echo lines=$(wc -l < " + metrics_file + "); cat " + (root() / "preempted.log").string();
  fs::path script_file = root() / "preempt_a_rank.sh";
  std::ofstream(script_file) << script << "\n";
  LaunchResult run = shell("bash " + script_file.string());
  EXPECT_NE(run.output.find("exit=143"), std::string::npos) << run.output;
  auto lines_at = run.output.find("lines=");
  ASSERT_NE(lines_at, std::string::npos) << run.output;
  const int stopped_at = std::stoi(run.output.substr(lines_at + 6));
  EXPECT_NE(run.output.find("stopped by Terminated after step " + std::to_string(stopped_at)), std::string::npos)
      << run.output;
  char checkpoint[32];
  std::snprintf(checkpoint, sizeof(checkpoint), "step_%08d", stopped_at);
  EXPECT_NO_THROW(Checkpoint(run_dir / checkpoint).tensor("exp_avg.transformer.wte.weight")) << run.output;
}

// A rank killed mid-run: the survivor ends the job with an error naming the
// collective and the peer, within the timeout (5 s here).
TEST_F(DataParallelRun, AKilledRankEndsTheOthersWithANamedErrorWithinTheTimeout) {
  fs::path run_dir = root() / "killed";
  std::string launch = "env STRATA_COMM_TIMEOUT=5 " + std::string(STRATA_MPIRUN) +
                       " --allow-run-as-root --oversubscribe --bind-to none -x STRATA_COMM_TIMEOUT"
                       " --mca orte_abort_on_non_zero_status 0 -np 2 " + STRATA_EXECUTABLE + " train " +
                       (root() / "tiny.toml").string() + " --set checkpoint.dir=" + run_dir.string() +
                       " " + kTwoMicroBatches + " --set train.steps=1000000 --set train.val_every=0";
  // Start the job, wait for its first steps, kill one rank (not mpirun), report how long the rest took.
  std::string script = "(" + launch + " > " + (root() / "killed.log").string() + " 2>&1; echo exit=$?) & " +
                       "for i in $(seq 100); do [ -s " + (run_dir / "metrics.jsonl").string() +
                       " ] && break; sleep 0.2; done; sleep 1; "
                       "victim=$(pgrep -f 'checkpoint.dir=" + run_dir.string() + "' -a | grep -v mpirun | "
                       "grep -v 'bash -c' | tail -1 | cut -d' ' -f1); kill -9 $victim; start=$(date +%s); wait; "
                       "echo seconds=$(( $(date +%s) - start )); cat " + (root() / "killed.log").string();
  fs::path script_file = root() / "kill_a_rank.sh";
  std::ofstream(script_file) << script << "\n";
  LaunchResult run = shell("bash " + script_file.string());
  EXPECT_EQ(run.output.find("exit=0"), std::string::npos) << run.output;
  // Either the survivor's next collective times out waiting for the peer, or,
  // when the one-host direct all-reduce is reading the dead rank's input at
  // that moment, the read fails at once; both name the peer.
  const bool timed_out = run.output.find("no progress for 5.0 s (the timeout); waiting for peer rank") != std::string::npos;
  const bool read_failed = run.output.find("cannot read the input of peer rank") != std::string::npos;
  EXPECT_TRUE(timed_out || read_failed) << run.output;
  auto seconds_at = run.output.find("seconds=");
  ASSERT_NE(seconds_at, std::string::npos) << run.output;
  EXPECT_LE(std::stoi(run.output.substr(seconds_at + 8)), 30) << run.output;
}

TEST_F(DataParallelRun, RanksStartedWithDifferentConfigsAreRefusedNamingTheKey) {
  std::string command = std::string(STRATA_EXECUTABLE) + " train " + (root() / "tiny.toml").string() +
                        " --set checkpoint.dir=" + (root() / "mismatch").string();
  LaunchResult run = shell(std::string(STRATA_MPIRUN) + " --allow-run-as-root --oversubscribe -np 1 " + command + " : -np 1 " +
                  command + " --set train.lr=0.002");
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find("rank 1 was started with a config that differs from rank 0's, first at key 'train.lr'"),
            std::string::npos)
      << run.output;
}

TEST_F(DataParallelRun, LayoutsThatDoNotFitTheLaunchAreErrorsNamingTheKeys) {
  std::string config = (root() / "tiny.toml").string() + " --set checkpoint.dir=" + (root() / "bad").string();
  LaunchResult wrong_degree = shell(mpirun(2) + STRATA_EXECUTABLE + " train " + config + " --set parallel.dp=3");
  EXPECT_NE(wrong_degree.exit_code, 0);
  EXPECT_NE(wrong_degree.output.find("key 'parallel.dp' is 3 but the job has 2 ranks"), std::string::npos)
      << wrong_degree.output;
  LaunchResult uneven = shell(mpirun(2) + STRATA_EXECUTABLE + " train " + config +
                     " --set train.batch_size=2 --set train.global_batch=2");
  EXPECT_NE(uneven.exit_code, 0);
  EXPECT_NE(uneven.output.find("key 'train.global_batch' (2) must be a multiple"), std::string::npos)
      << uneven.output;
  LaunchResult one_process = shell(std::string(STRATA_EXECUTABLE) + " train " + config + " --set parallel.dp=2");
  EXPECT_NE(one_process.exit_code, 0);
  EXPECT_NE(one_process.output.find("key 'parallel.dp' is 2 but this is one process"), std::string::npos)
      << one_process.output;
  LaunchResult zero = shell(mpirun(2) + STRATA_EXECUTABLE + " train " + config + " --set parallel.zero=3");
  EXPECT_NE(zero.output.find("key 'parallel.zero' must be 0, 1 or 2, got 3"), std::string::npos) << zero.output;
  LaunchResult bucket = shell(std::string(STRATA_EXECUTABLE) + " train " + config + " --set parallel.bucket_mb=0");
  EXPECT_NE(bucket.output.find("key 'parallel.bucket_mb' must be positive, got 0"), std::string::npos)
      << bucket.output;
  LaunchResult nested = shell(mpirun(1) + STRATA_EXECUTABLE + " train " + config + " --nproc 2");
  EXPECT_NE(nested.exit_code, 0);
  EXPECT_NE(nested.output.find("already runs under mpirun"), std::string::npos) << nested.output;
  LaunchResult no_mpirun = shell("env PATH=/nonexistent " + std::string(STRATA_EXECUTABLE) + " train " + config + " --nproc 2");
  EXPECT_NE(no_mpirun.exit_code, 0);
  EXPECT_NE(no_mpirun.output.find("starting 2 ranks needs mpirun on PATH"), std::string::npos) << no_mpirun.output;
}

// parallel.plan = "auto" on 2 ranks: the planner chooses the layout of the 2 ranks (data, tensor,
// sequence or pipeline parallelism) and the micro-batch, the run executes exactly that, and
// plan.json holds prediction and measurement.
TEST_F(DataParallelRun, AutoPlanChoosesForTheLaunchedRanksAndTheRunExecutesIt) {
  fs::path run_dir = train("auto_dp2", mpirun(2),
                           "--set train.global_batch=8 --set train.steps=4 --set parallel.plan=auto "
                           "--set parallel.cluster=this-machine");
  nlohmann::json record = nlohmann::json::parse(std::ifstream(run_dir / "plan.json"));
  const nlohmann::json& chosen = record["chosen"]["plan"];
  const int dp = chosen["dp"], tp = chosen["tp"], pp = chosen["pp"];
  EXPECT_EQ(dp * tp * pp, 2) << chosen.dump();
  const int micro_batch = chosen["micro_batch"];
  const std::string executed = last_output_;
  if (dp == 2) {
    EXPECT_NE(executed.find("data parallel: 2 ranks, micro-batches of " + std::to_string(micro_batch) + " rows"),
              std::string::npos)
        << executed;
  }
  if (tp == 2) {
    EXPECT_NE(executed.find("tensor parallel: 2 ranks per layer"), std::string::npos) << executed;
  }
  if (chosen["sp"].get<bool>()) {
    EXPECT_NE(executed.find("sequence parallel:"), std::string::npos) << executed;
  }
  if (pp == 2) {
    EXPECT_NE(executed.find("pipeline parallel: 2 stages"), std::string::npos) << executed;
  }
  EXPECT_GT(record["measured"]["step_s"].get<double>(), 0.0);
  EXPECT_GT(record["chosen"]["step_s"].get<double>(), 0.0);
  // The run's saved config is the layout it ran.
  std::ifstream config_file(run_dir / "config.toml");
  const std::string config_text((std::istreambuf_iterator<char>(config_file)), std::istreambuf_iterator<char>());
  EXPECT_NE(config_text.find("tp = " + std::to_string(tp)), std::string::npos) << config_text;
}

TEST_F(DataParallelRun, NprocLaunchesTheSameRunUnderMpirunAndSaysHow) {
  LaunchResult run = shell(std::string(STRATA_EXECUTABLE) + " train " + (root() / "tiny.toml").string() +
                  " --set checkpoint.dir=" + (root() / "nproc").string() + " " + kTwoMicroBatches +
                  " --set train.steps=3 --nproc 2");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("launching: "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("data parallel: 2 ranks"), std::string::npos) << run.output;
  // Every run records its layout and what it measured, manual ones too.
  nlohmann::json record = nlohmann::json::parse(std::ifstream(root() / "nproc" / "plan.json"));
  EXPECT_EQ(record["mode"], "manual");
  EXPECT_EQ(record["chosen"]["plan"]["dp"], 2);
  EXPECT_EQ(record["chosen"]["plan"]["micro_batches"], 1);
  EXPECT_EQ(record["measured"]["peak_rss_mib_per_rank"].size(), 2u);
  EXPECT_TRUE(record["measured"].contains("comm_wait_s")) << record.dump();
}

}  // namespace
}  // namespace strata
