#pragma once
// The fixture of the training-loop tests: a tiny corpus prepared once per
// test suite, and configs of a tiny GPT-2 over it writing into per-test run
// directories.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/tiny_corpus.h"
#include "train/config.h"

namespace strata::testing {

class TinyTrainingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                      ("strata_training_test_" + std::to_string(::getpid())));
    prepare_tiny_corpus(*root_, 400);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*root_);
    delete root_;
  }

  // 6 steps of 2 x 2 rows of 16 tokens, validating every 3 steps; `extra`
  // overrides come last.
  TrainConfig config(const std::string& run, std::vector<std::string> extra = {}) {
    std::vector<std::string> overrides{
        "data.dir=" + (*root_ / "data").string(), "checkpoint.dir=" + (*root_ / run).string(),
        "train.steps=6", "train.warmup_steps=2", "train.val_every=3", "train.val_batches=2",
        "checkpoint.every=0", "ops.threads=2"};
    overrides.insert(overrides.end(), extra.begin(), extra.end());
    return parse_train_config(kTiny, "tiny.toml", overrides);
  }

  static const std::filesystem::path& root() { return *root_; }

  static constexpr const char* kTiny = R"(
[model]
n_layer = 2
n_head = 2
n_embd = 32
vocab_size = 320
block_size = 16
[train]
batch_size = 2
global_batch = 4
lr = 3e-3
lr_min = 3e-4
grad_clip = 0.5
)";

 private:
  static inline std::filesystem::path* root_ = nullptr;
};

}  // namespace strata::testing
