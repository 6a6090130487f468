// `mpirun -np 2 strata train --trace FILE` with dp = 2: one timeline with a
// track (pid) per rank, every collective a span with its bytes, group and
// algorithm, the ranks' parts merged and removed, and a gap analysis per rank
// and step on stdout.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include "core/json_file.h"
#include "core/trace_analysis.h"
#include "parallel/run_support.h"
#include "support/trace_checks.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

class TraceRun : public testing::TrainRunSuite {
 protected:
  static void SetUpTestSuite() {
    set_up_suite("trace_run", "n_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 321\nblock_size = 16\n");
  }
};

TEST_F(TraceRun, TwoDataParallelRanksGiveOneTrackEachInOneMergedFile) {
  const fs::path file = root() / "dp2.json";
  train("dp2", testing::mpirun(2),
        "--set train.batch_size=2 --set train.global_batch=4 --set train.steps=4 --trace " + file.string() +
            " --trace-steps 2:4");
  ASSERT_TRUE(fs::exists(file)) << last_output_;
  EXPECT_FALSE(fs::exists(root() / "dp2.rank1.json"));  // merged, then removed
  nlohmann::json trace = read_json_file(file);
  testing::expect_well_formed_trace(trace);
  testing::expect_spans_nest(trace);
  EXPECT_EQ(testing::trace_processes(trace), (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}}));

  std::set<int> pids, step_pids, collective_pids;
  std::set<std::string> collectives;
  for (const nlohmann::json& span : testing::trace_spans(trace)) {
    pids.insert(span["pid"].get<int>());
    if (span["cat"] == "step") step_pids.insert(span["pid"].get<int>());
    if (span["cat"] == "comm_flight") {
      collective_pids.insert(span["pid"].get<int>());
      collectives.insert(span["name"].get<std::string>());
      for (const char* key : {"bytes", "group", "seq", "group_size"}) {
        ASSERT_TRUE(span["args"].contains(key)) << key << " in " << span.dump();
      }
      if (span["name"] == "all_reduce") {
        EXPECT_TRUE(span["args"].contains("algorithm")) << span.dump();
        EXPECT_EQ(span["args"]["group_size"], 2) << span.dump();
      }
    }
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(step_pids, (std::set<int>{0, 1}));
  EXPECT_EQ(collective_pids, (std::set<int>{0, 1}));
  EXPECT_TRUE(collectives.count("all_reduce")) << "the gradient bucket's all-reduce";

  std::vector<trace::StepGaps> steps = trace::analyse_steps(trace);
  ASSERT_EQ(steps.size(), 4u);  // steps 2 and 3 on two ranks
  for (const trace::StepGaps& gaps : steps) {
    EXPECT_TRUE(gaps.step == 2 || gaps.step == 3) << gaps.step;
    double sum = 0;
    for (double ms : gaps.ms) sum += ms;
    EXPECT_NEAR(sum, gaps.step_ms, 0.05 * gaps.step_ms);
  }
  EXPECT_NE(last_output_.find("gap analysis"), std::string::npos) << last_output_;
  EXPECT_NE(last_output_.find("exposed comm"), std::string::npos) << last_output_;
}

}  // namespace
}  // namespace strata
