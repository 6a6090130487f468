// effective_cache_bytes against the cached-fraction formula it inverts: rates
// made by that formula from a known cache give the cache back; a cache that
// speeds up no copy, and one that holds every probe, take their bounds.
#include <gtest/gtest.h>

#include <vector>

#include "comm/cost_model.h"
#include "core/error.h"

namespace strata::comm {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// The node's copy rate over `touched` bytes with a cache of `cache` bytes: a
// fraction cache / touched of the bytes at `cached` B/s, the rest at `memory`.
double mixed_rate(double touched, double cache, double cached, double memory) {
  const double share = touched <= cache ? 1.0 : cache / touched;
  return 1.0 / (share / cached + (1.0 - share) / memory);
}

std::vector<CacheProbePoint> points_for(double cache, double cached, double memory) {
  std::vector<CacheProbePoint> points;
  for (double touched : {1 * kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB}) {
    points.push_back({touched, mixed_rate(touched, cache, cached, memory)});
  }
  return points;
}

TEST(CacheFit, RatesOfAKnownCacheGiveItBack) {
  for (double cache : {2.5 * kMiB, 6 * kMiB, 40 * kMiB}) {
    EXPECT_NEAR(effective_cache_bytes(points_for(cache, 60e9, 20e9), 20e9, 300 * kMiB), cache, 1e-6 * cache)
        << cache / kMiB << " MiB";
  }
  // The points in any order; a noisy point slower than memory counts as no cache at all.
  std::vector<CacheProbePoint> shuffled = points_for(6 * kMiB, 60e9, 20e9);
  std::swap(shuffled[0], shuffled[3]);
  shuffled.push_back({32 * kMiB, 19e9});
  EXPECT_NEAR(effective_cache_bytes(shuffled, 20e9, 300 * kMiB), 6 * kMiB, 1e-6 * 6 * kMiB);
}

TEST(CacheFit, NeverAboveWhatTheMachineReportsButAtLeastTheSmallestProbe) {
  EXPECT_NEAR(effective_cache_bytes(points_for(40 * kMiB, 60e9, 20e9), 20e9, 8 * kMiB), 8 * kMiB, 1e-6);
  // Every probe at the in-cache rate: nothing measured bounds the cache below the machine's report.
  EXPECT_EQ(effective_cache_bytes(points_for(1e12, 60e9, 20e9), 20e9, 300 * kMiB), 300 * kMiB);
  EXPECT_EQ(effective_cache_bytes(points_for(1e12, 60e9, 20e9), 20e9, 0.0), 64 * kMiB);
  // Copies no faster in cache than from memory: the smallest probe, where the model's two rates agree anyway.
  EXPECT_EQ(effective_cache_bytes(points_for(6 * kMiB, 20e9, 25e9), 25e9, 300 * kMiB), 1 * kMiB);
}

TEST(CacheFit, RefusesAFitWithoutRates) {
  EXPECT_THROW(effective_cache_bytes({}, 20e9, 0.0), Error);
  EXPECT_THROW(effective_cache_bytes(points_for(6 * kMiB, 60e9, 20e9), 0.0, 0.0), Error);
}

}  // namespace
}  // namespace strata::comm
