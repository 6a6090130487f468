// The calibration fit recovers known scales from rows built with the model.
#include <gtest/gtest.h>

#include "comm/bench.h"

namespace strata::comm {
namespace {

// Rows of a fictitious ring run, 1e3 to 1e9 bytes: time = 2.5 x latency terms
// + 0.7 x transfer terms, in each of `rounds` rounds (0: only the median given).
BenchReport ring_report(size_t rounds) {
  BenchReport report;
  for (double bytes = 1e3; bytes <= 1e9; bytes *= 10) {
    BenchRow row;
    row.algorithm = row.ran = "ring";
    row.bytes = static_cast<size_t>(bytes);
    row.model_latency_us = 14.0;
    row.model_transfer_us = bytes / 5e3;
    row.time_us = row.slowest_us = 2.5 * row.model_latency_us + 0.7 * row.model_transfer_us;
    row.round_us.assign(rounds, row.time_us);
    report.rows.push_back(row);
  }
  return report;
}

TEST(Calibration, RecoversTheScalesThatMadeTheTimes) {
  BenchReport report = ring_report(0);
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
  // The model already explains every row: the size factors are 1.
  ASSERT_EQ(ring.size_factors.size(), 7u);
  for (const auto& [bytes, factor] : ring.size_factors) EXPECT_NEAR(factor, 1.0, 1e-9) << bytes;
  // No rows for binomial: its entry stays.
  const Calibration& untouched = fitted[static_cast<size_t>(Algorithm::BinomialTree)];
  EXPECT_EQ(untouched.latency_scale, 3.0);
  EXPECT_EQ(untouched.bandwidth_scale, 4.0);
}

TEST(Calibration, OneDisturbedMeasurementDoesNotMoveTheFit) {
  BenchReport report;
  for (double bytes = 1e3; bytes <= 1e9; bytes *= 10) {
    BenchRow row;
    row.algorithm = row.ran = "shm";
    row.bytes = static_cast<size_t>(bytes);
    row.model_latency_us = 2.0;
    row.model_transfer_us = bytes / 1e4;
    row.time_us = row.slowest_us = 1.5 * row.model_latency_us + 2.0 * row.model_transfer_us;
    report.rows.push_back(row);
  }
  report.rows[3].time_us = report.rows[3].slowest_us *= 10;  // 1e6 bytes: a rank descheduled throughout
  std::array<Calibration, kAlgorithmSlots> fitted{};
  fit_calibration(report, fitted);
  const Calibration& shm = fitted[static_cast<size_t>(Algorithm::SharedMemory)];
  EXPECT_NEAR(shm.bandwidth_scale, 2.0, 1e-6);
  EXPECT_NEAR(shm.latency_scale, 1.5, 1e-6);
  // ... nor the size corrections, which are medians of each size and its neighbours.
  for (const auto& [bytes, factor] : shm.size_factors) EXPECT_NEAR(factor, 1.0, 1e-9) << bytes;
}

TEST(Calibration, SizeFactorsFollowASystematicDeviation) {
  BenchReport report;
  // Transfer-bound rows; sizes up to 1e5 bytes run three times slower than the straight line.
  for (double bytes = 1e3; bytes <= 1e9; bytes *= 10) {
    BenchRow row;
    row.algorithm = row.ran = "direct";
    row.bytes = static_cast<size_t>(bytes);
    row.model_transfer_us = bytes / 1e4;
    row.time_us = row.slowest_us = row.model_transfer_us * (bytes <= 1e5 ? 3.0 : 1.0);
    report.rows.push_back(row);
  }
  std::array<Calibration, kAlgorithmSlots> fitted{};
  fit_calibration(report, fitted);
  const Calibration& direct = fitted[static_cast<size_t>(Algorithm::DirectRead)];
  EXPECT_NEAR(direct.bandwidth_scale, 1.0, 1e-9);
  for (const BenchRow& row : report.rows) {
    double predicted = direct.bandwidth_scale * row.model_transfer_us * direct.size_factor(static_cast<double>(row.bytes));
    EXPECT_NEAR(predicted, row.time_us, 1e-9 * row.time_us) << row.bytes;
  }
  // Between measured sizes the factor is interpolated in log(bytes): 2 halfway between 1e5 (3) and 1e6 (1).
  EXPECT_NEAR(direct.size_factor(std::sqrt(1e5 * 1e6)), 2.0, 1e-9);
}

// The end points keep a steady trend (each is the median of itself, its
// neighbour and the line through the two nearest points), and one disturbed
// end point is pulled back onto it.
TEST(Calibration, EndPointsFollowTheTrendAndShrugOffADisturbance) {
  BenchReport report;
  const std::vector<double> factors = {3.0, 2.5, 2.0, 1.5, 1.0, 1.0, 1.0};
  for (size_t i = 0; i < factors.size(); ++i) {
    BenchRow row;
    row.algorithm = row.ran = "pairwise";
    row.bytes = size_t{4096} << i;
    row.model_transfer_us = static_cast<double>(row.bytes) / 1e4;
    row.time_us = row.slowest_us = row.model_transfer_us * factors[i];
    report.rows.push_back(row);
  }
  std::array<Calibration, kAlgorithmSlots> fitted{};
  fit_calibration(report, fitted);
  const Calibration& pairwise = fitted[static_cast<size_t>(Algorithm::Pairwise)];
  auto predicted = [&](const BenchRow& row) {
    return pairwise.bandwidth_scale * row.model_transfer_us * pairwise.size_factor(static_cast<double>(row.bytes));
  };
  EXPECT_NEAR(predicted(report.rows.front()), report.rows.front().time_us, 1e-9 * report.rows.front().time_us);
  EXPECT_NEAR(predicted(report.rows.back()), report.rows.back().time_us, 1e-9 * report.rows.back().time_us);
  report.rows.front().time_us *= 10;  // the smallest size disturbed
  fit_calibration(report, fitted);
  EXPECT_NEAR(predicted(report.rows.front()), report.rows.front().time_us / 10, 1e-9 * report.rows.front().time_us);
}

// A fixed cost only the smallest size shows: a step between the end point
// and its neighbour. Settled over enough rounds, the end keeps it; from a
// single measurement (or too few rounds to tell), it is pulled onto the trend
// as a disturbance would be.
TEST(Calibration, AnEndPointSettledOverRoundsKeepsItsStep) {
  auto report_with_rounds = [](size_t rounds) {
    BenchReport report;
    const std::vector<double> factors = {3.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0};
    for (size_t i = 0; i < factors.size(); ++i) {
      BenchRow row;
      row.algorithm = row.ran = "pairwise";
      row.bytes = size_t{4096} << (2 * i);
      row.model_transfer_us = static_cast<double>(row.bytes) / 1e4;
      row.time_us = row.slowest_us = row.model_transfer_us * factors[i];
      // Rounds within 5% of the time, their median the time itself for 2, 3 and 5 rounds.
      const double spread[] = {0.95, 1.05, 1.0, 0.95, 1.05};
      for (size_t round = 0; round < rounds; ++round) row.round_us.push_back(row.time_us * spread[round]);
      report.rows.push_back(row);
    }
    return report;
  };
  auto smallest_predicted_over_measured = [](const BenchReport& report) {
    std::array<Calibration, kAlgorithmSlots> fitted{};
    EXPECT_TRUE(fit_calibration(report, fitted).empty());
    const Calibration& pairwise = fitted[static_cast<size_t>(Algorithm::Pairwise)];
    const BenchRow& row = report.rows.front();
    return pairwise.bandwidth_scale * row.model_transfer_us * pairwise.size_factor(static_cast<double>(row.bytes)) /
           row.time_us;
  };
  // Every round's median is the straight line's time (x 3 at 4 KiB): the fit is exact there.
  EXPECT_NEAR(smallest_predicted_over_measured(report_with_rounds(5)), 1.0, 1e-9);
  EXPECT_NEAR(smallest_predicted_over_measured(report_with_rounds(kSettlingRounds)), 1.0, 1e-9);
  // One measurement, or two rounds: the step is taken for a disturbance (the factor of its neighbours, 1).
  EXPECT_NEAR(smallest_predicted_over_measured(report_with_rounds(0)), 1.0 / 3.0, 1e-9);
  EXPECT_NEAR(smallest_predicted_over_measured(report_with_rounds(2)), 1.0 / 3.0, 1e-9);
}

TEST(Calibration, RoundSpreadIsTheInterquartileRangeOverTheMedian) {
  BenchRow row;
  EXPECT_EQ(round_spread(row), 0.0);  // no rounds
  row.round_us = {10, 12, 11, 30, 13};  // sorted 10 11 12 13 30: quartiles 11 and 13, median 12
  EXPECT_NEAR(round_spread(row), 2.0 / 12.0, 1e-12);
  EXPECT_FALSE(unsettled(row));
  row.round_us = {4, 1, 3, 2};  // quartiles at positions 0.75 and 2.25: 1.75 and 3.25, median 2.5
  EXPECT_NEAR(round_spread(row), 1.5 / 2.5, 1e-12);
  EXPECT_TRUE(unsettled(row));
}

TEST(Calibration, OneOutlierRoundPerSizeGivesTheCleanFit) {
  std::array<Calibration, kAlgorithmSlots> clean{}, noisy{};
  BenchReport report = ring_report(5);
  EXPECT_TRUE(fit_calibration(report, clean).empty());
  // One round of every size three times slower (a different round each time),
  // and the reported medians spoilt too: the fit reads the rounds.
  for (size_t i = 0; i < report.rows.size(); ++i) {
    BenchRow& row = report.rows[i];
    row.round_us[i % 5] *= 3.0;
    row.time_us *= 2.0;
  }
  EXPECT_TRUE(fit_calibration(report, noisy).empty());
  const Calibration& ring = noisy[static_cast<size_t>(Algorithm::Ring)];
  EXPECT_NEAR(ring.latency_scale, 2.5, 1e-6);
  EXPECT_NEAR(ring.bandwidth_scale, 0.7, 1e-6);
  const Calibration& reference = clean[static_cast<size_t>(Algorithm::Ring)];
  EXPECT_EQ(ring.latency_scale, reference.latency_scale);
  EXPECT_EQ(ring.bandwidth_scale, reference.bandwidth_scale);
  EXPECT_EQ(ring.size_factors, reference.size_factors);
}

TEST(Calibration, ADisagreeingSizeIsReportedAndLeftOut) {
  BenchReport report = ring_report(5);
  // 1e6 bytes: rounds from 1x to 5x the model's time (spread (4 - 2) / 3), and a
  // median far off the line; fitted, it would set that size's factor to 3.
  BenchRow& disturbed = report.rows[3];
  const double time = disturbed.time_us;
  disturbed.round_us = {time, 5 * time, 2 * time, 4 * time, 3 * time};
  std::array<Calibration, kAlgorithmSlots> fitted{};
  EXPECT_EQ(fit_calibration(report, fitted), std::vector<size_t>{3});
  EXPECT_NEAR(round_spread(disturbed), 2.0 / 3.0, 1e-12);
  const Calibration& ring = fitted[static_cast<size_t>(Algorithm::Ring)];
  EXPECT_NEAR(ring.latency_scale, 2.5, 1e-6);
  EXPECT_NEAR(ring.bandwidth_scale, 0.7, 1e-6);
  ASSERT_EQ(ring.size_factors.size(), 6u);  // every size but 1e6
  for (const auto& [bytes, factor] : ring.size_factors) {
    EXPECT_NE(bytes, 1e6);
    EXPECT_NEAR(factor, 1.0, 1e-9) << bytes;
  }
  // Every row unsettled: nothing to fit, the entry stays.
  for (BenchRow& row : report.rows) row.round_us = {1, 2, 3, 4, 5};
  std::array<Calibration, kAlgorithmSlots> kept{};
  kept[static_cast<size_t>(Algorithm::Ring)] = {3.0, 4.0};
  EXPECT_EQ(fit_calibration(report, kept).size(), report.rows.size());
  EXPECT_EQ(kept[static_cast<size_t>(Algorithm::Ring)].latency_scale, 3.0);
  EXPECT_EQ(kept[static_cast<size_t>(Algorithm::Ring)].bandwidth_scale, 4.0);
}

}  // namespace
}  // namespace strata::comm
