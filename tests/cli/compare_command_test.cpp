// `strata compare` end to end: exit statuses (0 all pass, 3 a tensor fails, 1 an error), the JSON
// and CSV files, the golden inputs, and `strata train` reading a config with a [compare] table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/run_strata.h"
#include "support/test_files.h"
#include "support/tiny_compare_config.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::run_strata;

TEST(CompareCommand, RefAgainstCpuExitsZeroAndWritesJsonAndCsv) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path()).string();
  const auto run = run_strata("compare " + config + " --a ops.backend=ref --b ops.backend=cpu --json " +
                              (dir / "c.json").string() + " --csv " + (dir / "c.csv").string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("result: pass"));
  const nlohmann::json json = nlohmann::json::parse(testing::read_bytes(dir / "c.json"));
  EXPECT_EQ(json.at("result"), "pass");
  EXPECT_TRUE(json.at("first_divergence").is_null());
  const std::string csv = testing::read_bytes(dir / "c.csv");
  EXPECT_EQ(static_cast<size_t>(std::count(csv.begin(), csv.end(), '\n')), json.at("tensors").size() + 1);
  EXPECT_THAT(csv, HasSubstr("\ntransformer.h.0.mlp.gelu.forward.y,gelu,pass,"));
}

TEST(CompareCommand, AFailingTensorExitsThreeWithTheFirstDivergenceAtTheTop) {
  testing::TempDir dir;
  const std::string config =
      testing::write_tiny_compare_job(dir.path(), "[compare.bf16]\nmin_cosine = 0.999999\nrtol = 1e-4\n").string();
  const auto run = run_strata("compare " + config + " --b precision.compute=bf16");
  EXPECT_EQ(run.exit_code, 3) << run.output;
  const size_t first = run.output.find("FIRST DIVERGENT OP: transformer.h.0.attn.c_attn.forward.y (linear)");
  EXPECT_NE(first, std::string::npos) << run.output;
  EXPECT_LT(first, run.output.find("tensors that fail"));
  EXPECT_THAT(run.output, HasSubstr("result: FAIL"));
}

TEST(CompareCommand, ErrorsNameTheKey) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path(), "[compare.f32]\nrtool = 1\n").string();
  auto run = run_strata("compare " + config);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("unknown key 'compare.f32.rtool'"));
  run = run_strata("compare " + config + " --b ops.backend=tpu");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("key 'ops.backend' must be one of \"ref\", \"cpu\", got \"tpu\""));
}

TEST(CompareCommand, TrainIgnoresTheCompareTableAndGoldenInputsAreWritten) {
  testing::TempDir dir;
  const std::string config = testing::write_tiny_compare_job(dir.path(), "[compare.f32]\nrtol = 1e-3\n").string();
  auto run = run_strata("train " + config + " --set train.steps=1");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  run = run_strata("compare " + config + " --set checkpoint.resume=true --golden-inputs " + (dir / "golden").string());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(testing::list_names(dir / "golden"),
            (std::vector<std::string>{"batch.safetensors", "config.json", "model.safetensors"}));
}

}  // namespace
}  // namespace strata
