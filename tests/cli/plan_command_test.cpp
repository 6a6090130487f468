// `strata plan` on a mixture of experts end to end: the search with expert parallelism, the MoE lines of
// the report and of --explain, sequence parallelism, and a bad imbalance named.
#include <gtest/gtest.h>

#include <string>

#include "cli/run_strata.h"

namespace strata {
namespace {

const std::string kMixtral = std::string(STRATA_SOURCE_DIR) + "/configs/mixtral_small.toml";

TEST(PlanCommand, PlansAMixtureOfExpertsWithItsExpertTerms) {
  testing::StrataRun searched = testing::run_strata("plan " + kMixtral + " dgx-h100 --top 3 --explain");
  ASSERT_EQ(searched.exit_code, 0) << searched.output;
  EXPECT_NE(searched.output.find("experts: 8 per layer, 2 per token: 5.0M parameters active"), std::string::npos)
      << searched.output;
  EXPECT_NE(searched.output.find("compute: experts' grouped GEMMs"), std::string::npos) << searched.output;

  // Sequence parallelism runs through the router (gathered) as the runtime's tensor-parallel pass runs it.
  testing::StrataRun sequence = testing::run_strata("plan " + kMixtral + " dgx-h100 --top 1 --tp 2 --sp on --explain");
  ASSERT_EQ(sequence.exit_code, 0) << sequence.output;
  EXPECT_NE(sequence.output.find("winner: dp=4 tp=2 pp=1 sp "), std::string::npos) << sequence.output;
  EXPECT_NE(sequence.output.find("tensor-parallel all-gather"), std::string::npos) << sequence.output;
  EXPECT_EQ(sequence.output.find("sequence parallelism for a mixture of experts"), std::string::npos)
      << sequence.output;

  testing::StrataRun split =
      testing::run_strata("plan " + kMixtral + " dgx-h100 --top 2 --ep 2 --moe-imbalance 1.5 --explain");
  ASSERT_EQ(split.exit_code, 0) << split.output;
  EXPECT_NE(split.output.find("winner: dp=4 tp=1 pp=1 ep=2 "), std::string::npos) << split.output;
  EXPECT_NE(split.output.find("expert-parallel all-to-all"), std::string::npos) << split.output;
  EXPECT_NE(split.output.find("(the busiest, imbalance 1.50), 4 experts per device"), std::string::npos)
      << split.output;
  EXPECT_NE(split.output.find("experts' imbalance (--moe-imbalance)"), std::string::npos) << split.output;
}

TEST(PlanCommand, BadExpertSettingsAreNamed) {
  testing::StrataRun imbalance = testing::run_strata("plan " + kMixtral + " dgx-h100 --moe-imbalance 0.5");
  EXPECT_NE(imbalance.exit_code, 0);
  EXPECT_NE(imbalance.output.find("--moe-imbalance"), std::string::npos) << imbalance.output;
  testing::StrataRun dense = testing::run_strata("plan gpt2-small dgx-h100 --ep 2");
  EXPECT_NE(dense.output.find("expert parallelism for a model without experts"), std::string::npos) << dense.output;
}

}  // namespace
}  // namespace strata
