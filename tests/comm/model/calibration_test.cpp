// The calibration fit recovers known scales from rows built with the model.
#include <gtest/gtest.h>

#include "comm/bench.h"

namespace strata::comm {
namespace {

TEST(Calibration, RecoversTheScalesThatMadeTheTimes) {
  BenchReport report;
  // Rows of a fictitious algorithm run: time = 2.5 x latency terms + 0.7 x transfer terms.
  for (double bytes = 1e3; bytes <= 1e9; bytes *= 10) {
    BenchRow row;
    row.algorithm = "ring";
    row.ran = "ring";
    row.bytes = static_cast<size_t>(bytes);
    row.model_latency_us = 14.0;
    row.model_transfer_us = bytes / 5e3;
    row.time_us = 2.5 * row.model_latency_us + 0.7 * row.model_transfer_us;
    report.rows.push_back(row);
  }
  BenchRow baseline = report.rows.front();
  baseline.algorithm = "baseline";
  baseline.ran = "MPI library";
  baseline.time_us = 1e9;  // ignored
  report.rows.push_back(baseline);
  std::array<Calibration, kAlgorithmSlots> fitted{};
  fitted[static_cast<size_t>(Algorithm::BinomialTree)] = {3.0, 4.0};
  fit_calibration(report, fitted);
  const Calibration& ring = fitted[static_cast<size_t>(Algorithm::Ring)];
  EXPECT_NEAR(ring.latency_scale, 2.5, 1e-6);
  EXPECT_NEAR(ring.bandwidth_scale, 0.7, 1e-6);
  // No rows for binomial: its entry stays.
  const Calibration& untouched = fitted[static_cast<size_t>(Algorithm::BinomialTree)];
  EXPECT_EQ(untouched.latency_scale, 3.0);
  EXPECT_EQ(untouched.bandwidth_scale, 4.0);
}

}  // namespace
}  // namespace strata::comm
