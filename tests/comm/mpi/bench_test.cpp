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

}  // namespace
}  // namespace strata::comm::testing
