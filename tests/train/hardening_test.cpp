// The training loop against hostile configs, diverging runs, crashes and a
// second run on the same directory (issue 20's findings, each reproduced).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "data/token_shard.h"
#include "support/error_text.h"
#include "tiny_training_test.h"
#include "train/trainer.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::error_of;

using HardeningTest = testing::TinyTrainingTest;

std::vector<float> values_of(const Tensor& tensor) {
  const float* data = tensor.data<float>();
  return std::vector<float>(data, data + tensor.numel());
}

std::vector<int64_t> logged_steps(const fs::path& run) {
  std::vector<int64_t> steps;
  std::ifstream in(run / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) steps.push_back(nlohmann::json::parse(line).at("step"));
  return steps;
}

// A run that died after step 6 but whose newest checkpoint is step 2 resumes from 2: the lines of
// steps 3-6 it had logged go, so the file reads as one run (no step twice).
TEST_F(HardeningTest, ResumingDropsTheMetricsOfStepsAfterTheCheckpoint) {
  const fs::path run = root() / "metrics_resume";
  { Trainer(config("metrics_resume", {"checkpoint.every=2"})).run(); }
  ASSERT_EQ(logged_steps(run), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  fs::remove_all(run / "step_00000004");
  fs::remove_all(run / "step_00000006");
  { Trainer(config("metrics_resume", {"checkpoint.every=2"})).run(); }
  EXPECT_EQ(logged_steps(run), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

// fp32 with an absurd learning rate: the second step's gradients are inf/nan. It is skipped (the
// weights stay as they were), and a second skip in a row ends the run naming a tensor.
TEST_F(HardeningTest, NonFiniteGradientsAreSkippedInFp32AndARunOfThemEndsTheRun) {
  Trainer trainer(config("diverge", {"train.lr=1e30", "train.lr_min=1e30", "train.warmup_steps=0",
                                     "train.max_skipped_steps=1"}));
  EXPECT_FALSE(trainer.step().skipped);
  std::vector<float> before = values_of(trainer.params().tensor(0));
  StepMetrics second = trainer.step();
  ASSERT_TRUE(second.skipped) << "grad_norm " << second.grad_norm;
  EXPECT_EQ(second.skip_reason, "inf/nan gradients");
  EXPECT_FALSE(std::isfinite(second.grad_norm));
  EXPECT_EQ(values_of(trainer.params().tensor(0)), before);
  std::string message = error_of([&] { trainer.step(); });
  EXPECT_THAT(message, HasSubstr("step 3: 2 steps in a row had inf/nan gradients (train.max_skipped_steps = 1)"));
  EXPECT_THAT(message, HasSubstr("the first parameter with a non-finite gradient is 'transformer."));
}

TEST_F(HardeningTest, NonFiniteHyperparametersAreRefusedNamingTheKey) {
  for (const char* setting : {"train.lr=inf", "train.weight_decay=nan", "train.adam_eps=inf", "train.grad_clip=nan",
                              "train.beta1=nan", "train.beta2=inf", "precision.loss_scale=inf"}) {
    std::string key = std::string(setting).substr(0, std::string(setting).find('='));
    EXPECT_THAT(error_of([&] { config("hyper", {setting}); }), HasSubstr("key '" + key + "'")) << setting;
  }
}

TEST_F(HardeningTest, MachineSizedLimitsAreCheckedBeforeAnythingIsAllocated) {
  EXPECT_THAT(error_of([&] { Trainer trainer(config("threads", {"ops.threads=100000"})); }),
              HasSubstr("key 'ops.threads' is 100000 but this machine has"));
  std::string message = error_of([&] { Trainer trainer(config("huge", {"model.n_layer=1000000000"})); });
  EXPECT_THAT(message, HasSubstr("model.n_layer = 1000000000"));
  EXPECT_THAT(message, HasSubstr("GiB"));
  EXPECT_FALSE(fs::exists(root() / "huge"));
}

// Resuming under another [model] table names every key that differs, the defaults-only ones included.
TEST_F(HardeningTest, ResumingAnotherModelNamesEveryKeyThatDiffers) {
  { Trainer(config("other_model", {"train.steps=2", "train.val_every=0"})).run(); }
  std::string message = error_of([&] {
    Trainer trainer(config("other_model", {"train.steps=3", "model.n_embd=64", "model.max_position_embeddings=64"}));
  });
  EXPECT_THAT(message, HasSubstr("holds another model"));
  EXPECT_THAT(message, HasSubstr("model.n_embd = 32 there, 64 here"));
  EXPECT_THAT(message, HasSubstr("model.max_position_embeddings = 0 there, 64 here"));
}

TEST_F(HardeningTest, AFreshRunRefusesADirectoryHoldingAnotherRunsCheckpoints) {
  { Trainer(config("taken", {"train.steps=2", "train.val_every=0"})).run(); }
  std::string message =
      error_of([&] { Trainer trainer(config("taken", {"train.steps=2", "checkpoint.resume=false"})); });
  EXPECT_THAT(message, HasSubstr("key 'checkpoint.dir'"));
  EXPECT_THAT(message, HasSubstr("checkpoint.resume = true"));
  EXPECT_EQ(Checkpoint(root() / "taken").step(), 2);
}

TEST_F(HardeningTest, TwoRunsCannotShareARunDirectory) {
  Trainer first(config("shared"));
  std::string message = error_of([&] { Trainer second(config("shared")); });
  EXPECT_THAT(message, HasSubstr("in use by another strata process (pid " + std::to_string(::getpid()) + ")"));
}

// Shards made by llm.c's own scripts need no meta.json: data.train and data.val take paths or globs.
TEST_F(HardeningTest, TrainsOnShardFilesGivenByGlobWithoutAMetaJson) {
  const fs::path shards = root() / "llmc_shards";
  fs::create_directories(shards);
  std::vector<int32_t> tokens(3000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919) % 320);
  for (const char* name : {"tiny_train_000001.bin", "tiny_train_000002.bin", "tiny_val_000000.bin"}) {
    write_token_shard(shards / name, tokens, 320);
  }
  const std::vector<std::string> data{"data.train=" + (shards / "tiny_train_*.bin").string(),
                                      "data.val=" + (shards / "tiny_val_*.bin").string(), "train.steps=2"};
  { Trainer(config("from_shards", data)).run(); }
  EXPECT_EQ(Checkpoint(root() / "from_shards").step(), 2);

  std::string message = error_of([&] {
    Trainer trainer(config("no_shards", {"data.train=" + (shards / "nothing_*.bin").string(),
                                         "data.val=" + (shards / "tiny_val_*.bin").string()}));
  });
  EXPECT_THAT(message, HasSubstr("key 'data.train': no token shard file matches '" + (shards / "nothing_*.bin").string()));
  EXPECT_THAT(error_of([&] { config("half", {"data.train=x.bin"}); }), HasSubstr("'data.train' and 'data.val'"));
}

}  // namespace
}  // namespace strata
