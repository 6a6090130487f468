// The pace of a rank's copies into its exchange area against the probe's
// curve: the first timed copy sets it, later ones move it a quarter of the
// way, copies too short to time and nonsense timings leave it, and a rank
// that reads every block checks again once kCheckInterval has passed.
#include <gtest/gtest.h>

#include "comm/copy_pace.h"

namespace strata::comm {
namespace {

using std::chrono::milliseconds;
constexpr double kKiB = 1024.0;

// A copy of `bytes` that ran at `Bps`.
double seconds_at(double bytes, double Bps) { return bytes / Bps; }

TEST(CopyPace, StartsAtTheProbesPaceAndChecksAtOnce) {
  const CopyPace pace;
  EXPECT_EQ(pace.factor(), 1.0);
  EXPECT_EQ(pace.fastest(), 1.0);
  EXPECT_TRUE(pace.check_due(CopyPace::Clock::now()));
}

TEST(CopyPace, TheFirstCopySetsThePaceAndLaterOnesMoveItAQuarter) {
  CopyPace pace;
  const auto t0 = CopyPace::Clock::now();
  // 64 KiB at 4 GB/s where the probe found 16: a quarter of its pace.
  pace.record(64 * kKiB, seconds_at(64 * kKiB, 4e9), 16e9, t0);
  EXPECT_NEAR(pace.factor(), 0.25, 1e-12);
  EXPECT_EQ(pace.fastest(), 1.0);  // never faster than the probe yet
  // Then at 24 GB/s (1.5x): 0.75 * 0.25 + 0.25 * 1.5.
  pace.record(64 * kKiB, seconds_at(64 * kKiB, 24e9), 16e9, t0);
  EXPECT_NEAR(pace.factor(), 0.5625, 1e-12);
  for (int i = 0; i < 40; ++i) pace.record(64 * kKiB, seconds_at(64 * kKiB, 24e9), 16e9, t0);
  EXPECT_NEAR(pace.factor(), 1.5, 1e-4);
  EXPECT_NEAR(pace.fastest(), pace.factor(), 1e-12);
  // Slow again: the pace falls, the fastest seen stays.
  pace.record(64 * kKiB, seconds_at(64 * kKiB, 4e9), 16e9, t0);
  EXPECT_LT(pace.factor(), 1.5);
  EXPECT_NEAR(pace.fastest(), 1.5, 1e-4);
}

TEST(CopyPace, ShortCopiesAndNonsenseTimingsAreIgnored) {
  CopyPace pace;
  const auto t0 = CopyPace::Clock::now();
  pace.record(CopyPace::kTimedBytes - 1, 1.0, 16e9, t0);  // far too slow, but too short to say so
  pace.record(64 * kKiB, 0.0, 16e9, t0);
  pace.record(64 * kKiB, -1.0, 16e9, t0);
  pace.record(64 * kKiB, 1e-6, 0.0, t0);  // no probed rate
  EXPECT_EQ(pace.factor(), 1.0);
  EXPECT_TRUE(pace.check_due(t0));  // nothing was timed
}

TEST(CopyPace, OneDescheduledCopyIsBoundedToASixteenth) {
  CopyPace pace;
  pace.record(64 * kKiB, 1.0, 16e9, CopyPace::Clock::now());  // a second for 64 KiB
  EXPECT_EQ(pace.factor(), 1.0 / 16.0);
  CopyPace fast;
  fast.record(64 * kKiB, 1e-12, 16e9, CopyPace::Clock::now());
  EXPECT_EQ(fast.factor(), 16.0);
}

TEST(CopyPace, AReadingRankChecksOnceTheIntervalHasPassed) {
  CopyPace pace;
  const auto t0 = CopyPace::Clock::now();
  pace.record(64 * kKiB, seconds_at(64 * kKiB, 4e9), 16e9, t0);
  EXPECT_FALSE(pace.check_due(t0));
  EXPECT_FALSE(pace.check_due(t0 + CopyPace::kCheckInterval - milliseconds(1)));
  EXPECT_TRUE(pace.check_due(t0 + CopyPace::kCheckInterval));
}

}  // namespace
}  // namespace strata::comm
