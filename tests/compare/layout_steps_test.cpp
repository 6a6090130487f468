// A layout side's steps (compare/layout_runs.h) run one launch per step, each resuming from the last one's
// checkpoint with only the newest kept; the steps are still one run's: bit-identical to the same steps run in
// this process.
#include "compare/layout_runs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "support/test_files.h"
#include "support/tiny_compare_config.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

int checkpoints_in(const fs::path& dir) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(dir)) count += entry.path().filename().string().starts_with("step_");
  return count;
}

TEST(CompareLayoutSteps, EachStepIsALaunchResumingTheLastWithOnlyTheNewestCheckpointKept) {
  testing::TempDir dir;
  const std::string config_path = testing::write_tiny_compare_job(dir.path()).string();
  const TrainConfig config = load_train_config(config_path, {});
  const fs::path work = dir / "side";
  std::vector<int> checkpoints_after_launch;
  const TrainLauncher launch = [&](int ranks, const std::vector<std::string>& args) {
    ASSERT_EQ(ranks, 1);  // the tiny job's layout: one process
    std::string command = std::string(STRATA_BINARY_DIR) + "/bin/strata";
    for (const std::string& arg : args) command += " '" + arg + "'";
    ASSERT_EQ(std::system((command + " > " + (dir / "launch.log").string() + " 2>&1").c_str()), 0)
        << command << "\n" << testing::read_bytes(dir / "launch.log");
    checkpoints_after_launch.push_back(checkpoints_in(work));
  };
  std::map<std::string, Tensor> launched;
  capture_layout_steps(config_path, {}, config, 3, work, launch,
                       [&](CapturedTensor&& t) { launched.emplace(t.name, std::move(t.tensor)); });
  EXPECT_EQ(checkpoints_after_launch, (std::vector<int>{1, 1, 1}));

  std::map<std::string, Tensor> in_process;
  capture_run(config, {.steps = 3}, [&](CapturedTensor&& t) { in_process.emplace(t.name, std::move(t.tensor)); });
  int compared = 0;
  for (const auto& [name, tensor] : in_process) {
    if (!name.starts_with("step")) continue;
    auto found = launched.find(name);
    ASSERT_NE(found, launched.end()) << name;
    ASSERT_EQ(found->second.nbytes(), tensor.nbytes()) << name;
    EXPECT_EQ(std::memcmp(found->second.raw(), tensor.raw(), tensor.nbytes()), 0) << name;
    ++compared;
  }
  EXPECT_EQ(compared, 3 * (2 + 2 * 12 + 4));  // per step: loss, norm, 12 per block, wte, wpe, ln_f w and b
}

}  // namespace
}  // namespace strata
