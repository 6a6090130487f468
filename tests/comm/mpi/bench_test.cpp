// comm-bench on a few small sizes: every run checked, nccl-tests' bandwidth
// definitions, rows for every algorithm, JSON that parses.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "comm/bench.h"
#include "mpi/comm_test_support.h"

namespace strata::comm::testing {
namespace {

TEST(Bench, ChecksEveryRunAndReportsNcclTestsBandwidths) {
  Communicator& world = flat_world();
  for (Collective op : kCollectives) {
    BenchOptions options;
    options.op = op;
    options.min_bytes = 4096;
    options.max_bytes = 65536;
    options.factor = 4;
    options.warmup = 0;
    options.iters = 2;
    options.rounds = 1;
    const bool exchange = op == Collective::AllToAll || op == Collective::AllToAllV;
    options.algorithms = {"auto", exchange ? "pairwise" : "ring", "baseline"};
    options.skew = 1.0;
    BenchReport report = run_bench(world, options);
    ASSERT_EQ(report.rows.size(), 3u * 3u) << collective_name(op);
    for (const BenchRow& row : report.rows) {
      std::string what = std::string(collective_name(op)) + " " + row.algorithm + " " + std::to_string(row.bytes);
      EXPECT_EQ(row.wrong, 0) << what;
      EXPECT_GT(row.time_us, 0.0) << what;
      EXPECT_NEAR(row.algbw_GBps, row.bytes / (row.time_us * 1e-6) / 1e9, 1e-6 * row.algbw_GBps) << what;
      EXPECT_NEAR(row.busbw_GBps, row.algbw_GBps * bus_bandwidth_factor(op, world.size()), 1e-9) << what;
      if (row.algorithm == "baseline") {
        EXPECT_TRUE(std::isnan(row.predicted_us)) << what;
      } else {
        EXPECT_GE(row.predicted_us, 0.0) << what;  // 0 for one rank
      }
    }
    nlohmann::json json = nlohmann::json::parse(format_json(report));
    EXPECT_EQ(json["rows"].size(), report.rows.size());
    EXPECT_EQ(json["collective"], collective_name(op));
  }
}

// One size, a few iterations, one round.
BenchOptions one_size(Collective op, size_t bytes, std::vector<std::string> algorithms) {
  BenchOptions options;
  options.op = op;
  options.min_bytes = options.max_bytes = bytes;
  options.warmup = 1;
  options.iters = 4;
  options.rounds = 1;
  options.algorithms = std::move(algorithms);
  return options;
}

// The blocking MPI call is a baseline of its own, checked like the others.
TEST(Bench, BlockingBaselineRunsAndIsChecked) {
  Communicator& world = flat_world();
  for (Collective op : {Collective::AllReduce, Collective::AllToAllV}) {
    BenchOptions options = one_size(op, 16384, {"baseline-blocking"});
    options.skew = 1.0;
    BenchReport report = run_bench(world, options);
    ASSERT_EQ(report.rows.size(), 1u);
    EXPECT_EQ(report.rows[0].wrong, 0) << collective_name(op);
    EXPECT_EQ(report.rows[0].ran, "MPI library, blocking");
    EXPECT_TRUE(report.rows[0].phase_us.empty());
  }
}

// --input fresh: every timed call gets its input written again, so even an
// in-place all-reduce, whose output replaces its input, gives the exact sum
// after every round (reusing it would sum the sums); every collective stays exact.
TEST(Bench, FreshInputRewritesEveryCallsInput) {
  Communicator& world = flat_world();
  if (world.size() < 2) GTEST_SKIP() << "needs two ranks";
  BenchOptions in_place = one_size(Collective::AllReduce, 16384, {"auto", "baseline"});
  in_place.in_place = true;
  in_place.fresh_input = true;
  in_place.rounds = 2;
  for (const BenchRow& row : run_bench(world, in_place).rows) EXPECT_EQ(row.wrong, 0) << row.algorithm;
  for (Collective op : kCollectives) {
    BenchOptions options = one_size(op, 65536, {"auto", "baseline"});
    options.fresh_input = true;
    options.skew = 1.0;
    BenchReport report = run_bench(world, options);
    for (const BenchRow& row : report.rows) {
      EXPECT_EQ(row.wrong, 0) << collective_name(op) << " " << row.algorithm;
      EXPECT_GT(row.time_us, 0.0) << collective_name(op) << " " << row.algorithm;
    }
    EXPECT_EQ(nlohmann::json::parse(format_json(report))["input"], "fresh");
  }
}

// --breakdown: every algorithm's calls split into the five phases; the call
// check costs time only where it is a message of its own (ring), not where
// the one-host algorithms carry it beside their data (shm, direct, pairwise).
TEST(Bench, BreakdownSplitsCallsIntoPhasesAndShowsWhereTheCheckRuns) {
  Communicator& world = flat_world();
  if (world.size() < 2 || !world.topology().cross_memory) GTEST_SKIP() << "needs two ranks that read each other's memory";
  auto run = [&](Collective op, std::vector<std::string> algorithms) {
    algorithms.push_back("baseline");
    BenchOptions options = one_size(op, 4096, std::move(algorithms));
    options.breakdown = true;
    return run_bench(world, options);
  };
  std::vector<BenchRow> rows = run(Collective::AllReduce, {"ring", "shm", "direct"}).rows;
  for (const BenchRow& row : run(Collective::AllToAll, {"pairwise"}).rows) rows.push_back(row);
  for (const BenchRow& row : rows) {
    if (row.algorithm == "baseline") {
      EXPECT_TRUE(row.phase_us.empty());
      continue;
    }
    ASSERT_EQ(row.phase_us.size(), kCallPhaseNames.size()) << row.algorithm;
    for (double us : row.phase_us) EXPECT_GE(us, 0.0) << row.algorithm;
    if (row.algorithm == "ring") {
      EXPECT_GT(row.check_us, 0.0) << "the ring's check is a message on the control channel";
    } else {
      EXPECT_EQ(row.check_us, 0.0) << row.algorithm << " carries the check beside its data";
    }
  }
}

}  // namespace
}  // namespace strata::comm::testing
