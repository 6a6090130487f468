// `strata plan` on a mixture of experts end to end: the search with expert parallelism, the MoE lines of
// the report and of --explain, sequence parallelism, and a bad imbalance named.
#include <gtest/gtest.h>

#include <string>
#include <utility>

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

// The row of the winner in a report's table: "  1  <plan> <step> ms [<low>, <high>] ms ...".
std::string winner_row(const std::string& report) {
  const size_t row = report.find("\n  1  ");
  return row == std::string::npos ? "" : report.substr(row + 1, report.find('\n', row + 1) - row - 1);
}

// The "<low>" and "<high>" texts of a row's interval.
std::pair<std::string, std::string> interval_texts(const std::string& row) {
  const size_t open = row.find('[');
  const size_t comma = row.find(", ", open);
  const size_t close = row.find(']', open);
  if (open == std::string::npos || comma == std::string::npos || close == std::string::npos) return {};
  return {row.substr(open + 1, comma - open - 1), row.substr(comma + 2, close - comma - 2)};
}

// The step-time interval of each listed plan, in the table and in --json; none at --figure-uncertainty 0.
TEST(PlanCommand, ShowsTheStepTimeIntervalFromTheAssumedFigures) {
  testing::StrataRun text = testing::run_strata("plan gpt2-small dgx-a100-80gb --top 2");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("step-time intervals: "), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("GEMM tile efficiencies"), std::string::npos) << text.output;  // the A100's are assumed
  const std::string row = winner_row(text.output);
  const auto [low, high] = interval_texts(row);
  ASSERT_FALSE(low.empty()) << text.output;
  const size_t step_end = row.find(" ms [");
  ASSERT_NE(step_end, std::string::npos) << row;
  const double step = std::stod(row.substr(row.rfind(' ', step_end - 1) + 1));
  EXPECT_LT(std::stod(low), step) << row;
  EXPECT_GT(std::stod(high), step) << row;

  testing::StrataRun json = testing::run_strata("plan gpt2-small dgx-a100-80gb --top 2 --json", false);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  for (const char* key : {"\"step_time_low_s\"", "\"step_time_high_s\"", "\"within_winner_interval\""}) {
    EXPECT_NE(json.output.find(key), std::string::npos) << key;
  }

  testing::StrataRun exact = testing::run_strata("plan gpt2-small dgx-a100-80gb --top 1 --figure-uncertainty 0");
  ASSERT_EQ(exact.exit_code, 0) << exact.output;
  const auto [exact_low, exact_high] = interval_texts(winner_row(exact.output));
  ASSERT_FALSE(exact_low.empty()) << exact.output;
  EXPECT_EQ(exact_low, exact_high) << exact.output;

  testing::StrataRun bad = testing::run_strata("plan gpt2-small dgx-a100-80gb --figure-uncertainty 1.5");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--figure-uncertainty"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace strata
