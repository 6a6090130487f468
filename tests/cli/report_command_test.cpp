// `strata report` end to end: a bad run directory or a Python that cannot draw is one clear error
// (exit 1), and nothing is written over the output.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "cli/run_strata.h"
#include "support/test_files.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using testing::run_strata;

void write_run(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  testing::write_bytes(dir / "metrics.jsonl", "{\"step\":1,\"loss\":5,\"lr\":0.1,\"grad_norm\":1,\"tokens_per_s\":9}\n");
  testing::write_bytes(dir / "config.toml", "[model]\nn_layer = 2\n");
}

TEST(ReportCommand, ABadRunDirectoryIsNamed) {
  testing::TempDir dir;
  const auto run = run_strata("report " + (dir / "absent").string() + " --out " + (dir / "r.html").string());
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr((dir / "absent").string() + ": not a directory"));
  EXPECT_FALSE(std::filesystem::exists(dir / "r.html"));
}

TEST(ReportCommand, APythonThatCannotDrawIsAnErrorAndLeavesTheOutputAsItWas) {
  testing::TempDir dir;
  write_run(dir / "run");
  testing::write_bytes(dir / "r.html", "an earlier report");
  const std::string arguments = "report " + (dir / "run").string() + " --out " + (dir / "r.html").string();

  ::setenv("STRATA_PYTHON", (dir / "no-such-python").c_str(), 1);
  auto run = run_strata(arguments);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("no Python tried (" + (dir / "no-such-python").string() + ") can run"));
  EXPECT_THAT(run.output, HasSubstr("apt-get install python3-matplotlib"));

  ::setenv("STRATA_PYTHON", "false", 1);  // starts, and fails
  run = run_strata(arguments);
  ::unsetenv("STRATA_PYTHON");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("the renderer ('false' running render_report.py) failed with status 1"));
  EXPECT_EQ(testing::read_bytes(dir / "r.html"), "an earlier report");
}

}  // namespace
}  // namespace strata
