// End-to-end behaviour of the training loop on a tiny corpus: determinism,
// bit-identical resume, and the bad-input cases that must never cost a checkpoint.
#include "train/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "ckpt/checkpoint.h"
#include "ops/sum_order.h"
#include "tiny_training_test.h"
#include "data/corpus.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using TrainerTest = testing::TinyTrainingTest;

std::vector<double> losses(Trainer& trainer, int steps) {
  std::vector<double> result;
  for (int i = 0; i < steps; ++i) result.push_back(trainer.step().loss);
  return result;
}

TEST_F(TrainerTest, SameConfigGivesBitIdenticalLosses) {
  Trainer first(config("det_a"));
  Trainer second(config("det_b"));
  std::vector<double> a = losses(first, 5);
  std::vector<double> b = losses(second, 5);
  EXPECT_EQ(a, b);
  EXPECT_LT(a.back(), a.front());  // it learns
  EXPECT_EQ(first.validation_loss(), second.validation_loss());
}

// ops.sum_order = "permuted" (a diagnostic) sums every GEMM in another order: the run trains within
// rounding of the natural order, on other bits. Each trainer sets the order when it is made, so the two
// run one after the other.
TEST_F(TrainerTest, PermutedSumOrderTrainsWithinRoundingOnOtherBits) {
  auto run = [&](const std::string& name, std::vector<std::string> overrides) {
    Trainer trainer(config(name, std::move(overrides)));
    std::vector<StepMetrics> steps;
    for (int i = 0; i < 5; ++i) steps.push_back(trainer.step());
    return steps;
  };
  const std::vector<StepMetrics> natural = run("natural", {});
  const std::vector<StepMetrics> permuted = run("permuted", {"ops.sum_order=permuted"});
  set_sum_order(SumOrder::Natural);
  int moved = 0;
  for (size_t i = 0; i < natural.size(); ++i) {
    EXPECT_NEAR(permuted[i].loss, natural[i].loss, 1e-5 * natural[i].loss) << "step " << i;
    EXPECT_NEAR(permuted[i].grad_norm, natural[i].grad_norm, 1e-5 * natural[i].grad_norm) << "step " << i;
    moved += permuted[i].grad_norm != natural[i].grad_norm;
  }
  EXPECT_GT(moved, 0);
}

TEST_F(TrainerTest, ResumeContinuesTheExactTrajectory) {
  Trainer uninterrupted(config("straight"));
  std::vector<double> expected = losses(uninterrupted, 6);

  {
    Trainer interrupted(config("resumed"));
    losses(interrupted, 3);
    interrupted.save_checkpoint();
  }
  Trainer resumed(config("resumed"));
  EXPECT_EQ(resumed.completed_steps(), 3);
  std::vector<double> tail = losses(resumed, 3);
  EXPECT_EQ(tail, std::vector<double>(expected.begin() + 3, expected.end()));
}

TEST_F(TrainerTest, RunWritesMetricsConfigAndCheckpoint) {
  Trainer trainer(config("full"));
  trainer.run();
  fs::path run = root() / "full";
  EXPECT_TRUE(fs::exists(run / "config.toml"));
  EXPECT_EQ(Checkpoint(resolve_checkpoint(run)).step(), 6);
  std::ifstream metrics(run / "metrics.jsonl");
  std::string line;
  int lines = 0, with_val = 0;
  while (std::getline(metrics, line)) {
    auto json = nlohmann::json::parse(line);
    ++lines;
    EXPECT_EQ(json.at("step").get<int>(), lines);
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s"}) {
      EXPECT_TRUE(json.contains(key)) << key;
    }
    EXPECT_EQ(json.at("tokens").get<int64_t>(), lines * 4 * 16);  // global batch 4 rows of 16 tokens
    EXPECT_FALSE(json.contains("mfu"));  // no parallel.cluster, no peak to measure against
    EXPECT_FALSE(json.contains("router_aux_loss"));  // a dense model has no router
    with_val += json.contains("val_loss");
  }
  EXPECT_EQ(lines, 6);
  EXPECT_EQ(with_val, 2);
  // The end-of-run op summary: the step's ops on cpu, all native in f32.
  auto ops = nlohmann::json::parse(std::ifstream(run / "ops.json"));
  EXPECT_EQ(ops.at("coverage").at("backend"), "cpu");
  EXPECT_TRUE(ops.at("coverage").at("verdict").at("quick_switch").get<bool>());
  EXPECT_FALSE(ops.at("coverage").at("ops").empty());
  EXPECT_TRUE(ops.at("ran_not_native").empty());
  EXPECT_FALSE(ops.contains("kernel_profile"));  // not profiled
  // The saved config reproduces the run's settings.
  TrainConfig saved = load_train_config((run / "config.toml").string(), {});
  EXPECT_EQ(saved.model.n_embd, 32);
  EXPECT_EQ(saved.steps, 6);
}

TEST_F(TrainerTest, MismatchedCheckpointIsRejectedAndKept) {
  {
    Trainer trainer(config("mismatch"));
    losses(trainer, 1);
    trainer.save_checkpoint();
  }
  fs::path latest = resolve_checkpoint(root() / "mismatch");
  try {
    Trainer wider(config("mismatch", {"model.n_embd=64"}));
    FAIL() << "a checkpoint with other shapes was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("model.n_embd = 32 there, 64 here"));
  }
  EXPECT_EQ(resolve_checkpoint(root() / "mismatch"), latest);
  EXPECT_EQ(Checkpoint(latest).step(), 1);
}

TEST_F(TrainerTest, MissingDataDirectoryIsNamed) {
  try {
    Trainer trainer(config("nodata", {"data.dir=" + (root() / "absent").string()}));
    FAIL();
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("absent"));
  }
}

TEST_F(TrainerTest, TokenizerLargerThanModelVocabIsNamed) {
  try {
    Trainer trainer(config("smallvocab", {"model.vocab_size=100"}));
    FAIL();
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("model.vocab_size"));
  }
}

// At start-up, not at the first save after hours of training.
TEST_F(TrainerTest, UnwritableRunDirectoryIsNamedAtStartUp) {
  fs::path blocker = root() / "blocker";
  std::ofstream(blocker) << "a file where a directory should be";
  try {
    Trainer trainer(config("blocker/run"));
    FAIL();
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("checkpoint.dir"));
    EXPECT_THAT(error.what(), HasSubstr("blocker"));
  }
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

TEST_F(TrainerTest, AutoPlanChoosesTheMicroBatchAndRecordsPredictionAndMeasurement) {
  TrainConfig auto_config = config("auto", {"parallel.plan=auto", "parallel.cluster=this-machine", "train.steps=3"});
  Trainer trainer(auto_config);
  trainer.run();
  auto record = nlohmann::json::parse(std::ifstream(root() / "auto" / "plan.json"));
  ASSERT_TRUE(record.contains("measured")) << record.dump(2);
  EXPECT_GT(record.at("measured").at("step_s").get<double>(), 0);
  std::string text = record.dump();
  EXPECT_NE(text.find("micro_batch"), std::string::npos) << text.substr(0, 400);
}

// The this-machine preset with its f32 matrix peak set to `tflops`, written under the run root.
fs::path cluster_with_f32_peak(const fs::path& dir, const std::string& tflops) {
  std::ifstream preset(fs::path(STRATA_SOURCE_DIR) / "configs" / "clusters" / "this-machine.toml");
  std::string text((std::istreambuf_iterator<char>(preset)), std::istreambuf_iterator<char>());
  const std::string f32 = "[device.f32]\nmatrix_tflops = ";
  const size_t at = text.find(f32);
  EXPECT_NE(at, std::string::npos);
  text.replace(at + f32.size(), text.find('\n', at + f32.size()) - at - f32.size(),
               "{ value = " + tflops + ", source = \"test\" }");
  const fs::path cluster = dir / ("f32_peak_" + tflops + ".toml");
  std::ofstream(cluster) << text;
  return cluster;
}

// MFU against a described device of 1 TFLOP/s: PaLM's model FLOPs, 6 N + 12 L C T per token.
TEST_F(TrainerTest, ModelFlopsUtilisationFollowsThePalmFormula) {
  Trainer trainer(config("mfu", {"parallel.cluster=" + cluster_with_f32_peak(root(), "1.0").string()}));
  const StepMetrics metrics = trainer.step();
  const double params = static_cast<double>(trainer.params().count());
  const double per_token = 6 * params + 12.0 * 2 * 32 * 16;  // n_layer 2, n_embd 32, block_size 16
  ASSERT_TRUE(metrics.mfu.has_value());
  EXPECT_NEAR(*metrics.mfu, per_token * metrics.tokens_per_s / 1e12, 1e-12);
}

// A peak the run beats (1 kFLOP/s) is the description's error: said once, with the remedy.
TEST_F(TrainerTest, UtilisationAboveOneBlamesTheDescribedPeakOnce) {
  Trainer trainer(config("mfu_above_one", {"parallel.cluster=" + cluster_with_f32_peak(root(), "1e-9").string()}));
  ::testing::internal::CaptureStdout();
  trainer.run();
  std::fflush(stdout);
  const std::string output = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(output, HasSubstr("warning: MFU"));
  EXPECT_THAT(output, HasSubstr("at step 1: this run beats the this machine (2-core x86) f32 peak of 1 device(s) "
                                "(1e-09 TFLOP/s), so that figure is too low for this machine; `strata calibrate`"));
  EXPECT_EQ(output.find("warning: MFU"), output.rfind("warning: MFU"));
}

TEST_F(TrainerTest, AutoPlanNeedsACluster) {
  try {
    config("auto_nocluster", {"parallel.plan=auto"});
    FAIL();
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("parallel.cluster"));
  }
}

}  // namespace
}  // namespace strata
