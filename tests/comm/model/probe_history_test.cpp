// The probes a launch layout keeps across launches and the figures they settle on (comm/probe_history.h): every
// figure the median of the probes, one outlier among three outvoted, and the probes kept on disk in order.
#include "comm/probe_history.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace strata::comm {
namespace {

// A one-host probe whose every measured figure is `scale` times a typical one.
ClusterDescription probe(double scale, const std::string& key = "2 ranks") {
  ClusterDescription d;
  d.probe_key = key;
  TopologyDesc& t = d.topology;
  t.ranks_per_node = 2;
  t.reduce_Bps = 12e9 * scale;
  t.memory_Bps = 20e9 * scale;
  t.cache_bytes = 32.0 * (1 << 20);
  t.intra = {2e-6 * scale, 15e9 * scale};
  t.inter = t.intra;
  t.copy.points = {{4096, 8e9 * scale}, {8388608, 9e9 * scale}};
  t.cross_read.points = {{4096, 3e9 * scale}, {8388608, 10e9 * scale}};
  t.local_copy.points = {{262144, 30e9 * scale}, {16777216, 11e9 * scale}};
  t.intra_message = {{4, 1e-6 * scale}, {4096, 3e-6 * scale}};
  return d;
}

void expect_scaled(const ClusterDescription& settled, double scale) {
  const ClusterDescription expected = probe(scale);
  const TopologyDesc& t = settled.topology;
  const TopologyDesc& e = expected.topology;
  EXPECT_DOUBLE_EQ(t.reduce_Bps, e.reduce_Bps);
  EXPECT_DOUBLE_EQ(t.memory_Bps, e.memory_Bps);
  EXPECT_DOUBLE_EQ(t.intra.latency_s, e.intra.latency_s);
  EXPECT_DOUBLE_EQ(t.intra.bandwidth_Bps, e.intra.bandwidth_Bps);
  EXPECT_DOUBLE_EQ(t.inter.bandwidth_Bps, e.inter.bandwidth_Bps);
  ASSERT_EQ(t.copy.points.size(), 2u);
  ASSERT_EQ(t.cross_read.points.size(), 2u);
  ASSERT_EQ(t.local_copy.points.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(t.copy.points[i].first, e.copy.points[i].first);
    EXPECT_DOUBLE_EQ(t.copy.points[i].second, e.copy.points[i].second);
    EXPECT_DOUBLE_EQ(t.cross_read.points[i].second, e.cross_read.points[i].second);
    EXPECT_DOUBLE_EQ(t.local_copy.points[i].second, e.local_copy.points[i].second);
    EXPECT_DOUBLE_EQ(t.intra_message[i].second, e.intra_message[i].second);
  }
}

TEST(ProbeHistory, OneOutlierAmongThreeProbesIsOutvoted) {
  // The outlier first, last or between: the settled figures are the typical probe's.
  expect_scaled(settled_figures({probe(3.0), probe(1.0), probe(1.0)}), 1.0);
  expect_scaled(settled_figures({probe(1.0), probe(1.0), probe(0.2)}), 1.0);
  // Every figure on its own: the median of 0.9, 1 and 1.2 is 1 whichever probe holds which.
  expect_scaled(settled_figures({probe(1.2), probe(0.9), probe(1.0)}), 1.0);
}

TEST(ProbeHistory, TwoProbesSettleOnTheirMeanAndOneOnItself) {
  expect_scaled(settled_figures({probe(1.0), probe(2.0)}), 1.5);
  expect_scaled(settled_figures({probe(0.7)}), 0.7);
  EXPECT_THROW(settled_figures({}), std::exception);
}

TEST(ProbeHistory, ACurveMeasuredAtOtherSizesIsTheNewestProbes) {
  ClusterDescription other = probe(5.0);
  other.topology.copy.points = {{4096, 1e9}, {32768, 2e9}, {8388608, 3e9}};
  ClusterDescription settled = settled_figures({other, probe(1.0), probe(2.0)});
  EXPECT_EQ(settled.topology.copy.points, probe(2.0).topology.copy.points);
  EXPECT_DOUBLE_EQ(settled.topology.reduce_Bps, probe(2.0).topology.reduce_Bps);  // the median still
  EXPECT_DOUBLE_EQ(settled.topology.cross_read.points[1].second, probe(2.0).topology.cross_read.points[1].second);
}

TEST(ProbeHistory, SettledFiguresCarryNoCalibration) {
  ClusterDescription calibrated = probe(1.0);
  calibrated.calibration[0].latency_scale = 2.0;
  EXPECT_TRUE(settled_figures({calibrated}).calibration[0].is_identity());
}

TEST(ProbeHistory, ProbesAreKeptInOrderAndAnotherLayoutsEndTheList) {
  const std::filesystem::path directory = std::filesystem::temp_directory_path() / "strata-probe-history-test";
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  const std::filesystem::path cache = directory / "comm-links-0123.toml";
  EXPECT_TRUE(kept_probes(cache, "2 ranks").empty());
  keep_probes(cache, {probe(1.0), probe(2.0), probe(3.0)});
  EXPECT_EQ(raw_probe_path(cache, 1).filename(), "comm-links-0123.probe1.toml");
  std::vector<ClusterDescription> kept = kept_probes(cache, "2 ranks");
  ASSERT_EQ(kept.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(kept[i].topology.reduce_Bps, probe(1.0 + i).topology.reduce_Bps);
  EXPECT_TRUE(kept_probes(cache, "4 ranks").empty());
  // Fewer probes remove the slots past them; a slot of another layout ends the list.
  keep_probes(cache, {probe(1.0), probe(2.0, "4 ranks")});
  EXPECT_FALSE(std::filesystem::exists(raw_probe_path(cache, 2)));
  EXPECT_EQ(kept_probes(cache, "2 ranks").size(), 1u);
  EXPECT_THROW(keep_probes(cache, {probe(1), probe(1), probe(1), probe(1)}), std::exception);
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace strata::comm
