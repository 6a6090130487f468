#include "comm/probe_history.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "core/error.h"

namespace strata::comm {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : (values[middle - 1] + values[middle]) / 2.0;
}

// The median of one figure, read from every probe by `figure`.
double median_of(const std::vector<ClusterDescription>& probes,
                 const std::function<double(const TopologyDesc&)>& figure) {
  std::vector<double> values;
  for (const ClusterDescription& probe : probes) values.push_back(figure(probe.topology));
  return median(values);
}

using Points = std::vector<std::pair<double, double>>;

// A curve's points, each value the median over the probes, where every probe measured the same sizes; else the
// newest probe's points.
Points settled_points(const std::vector<ClusterDescription>& probes,
                      const std::function<const Points&(const TopologyDesc&)>& curve) {
  const Points& newest = curve(probes.back().topology);
  for (const ClusterDescription& probe : probes) {
    const Points& other = curve(probe.topology);
    const bool same_sizes = other.size() == newest.size() &&
                            std::equal(other.begin(), other.end(), newest.begin(),
                                       [](const auto& a, const auto& b) { return a.first == b.first; });
    if (!same_sizes) return newest;
  }
  Points settled = newest;
  for (size_t i = 0; i < settled.size(); ++i) {
    settled[i].second = median_of(probes, [&](const TopologyDesc& t) { return curve(t)[i].second; });
  }
  return settled;
}

}  // namespace

std::filesystem::path raw_probe_path(const std::filesystem::path& cache, size_t index) {
  return cache.parent_path() / fmt::format("{}.probe{}.toml", cache.stem().string(), index);
}

std::vector<ClusterDescription> kept_probes(const std::filesystem::path& cache, const std::string& key) {
  std::vector<ClusterDescription> probes;
  for (size_t index = 0; index < kSettlingProbes; ++index) {
    const std::filesystem::path path = raw_probe_path(cache, index);
    if (!std::filesystem::exists(path)) break;
    try {
      ClusterDescription probe = load_cluster_description(path);
      if (probe.probe_key != key) break;
      probes.push_back(std::move(probe));
    } catch (const Error&) {
      break;  // another version's or a damaged file: the layer's own, written again
    }
  }
  return probes;
}

void keep_probes(const std::filesystem::path& cache, const std::vector<ClusterDescription>& probes) {
  STRATA_CHECK(probes.size() <= kSettlingProbes, "{} probes kept, at most {}", probes.size(), kSettlingProbes);
  for (size_t index = 0; index < probes.size(); ++index) {
    save_cluster_description(raw_probe_path(cache, index), probes[index]);
  }
  for (size_t index = probes.size(); index < kSettlingProbes; ++index) {
    std::filesystem::remove(raw_probe_path(cache, index));
  }
}

ClusterDescription settled_figures(const std::vector<ClusterDescription>& probes) {
  STRATA_CHECK(!probes.empty(), "no probe to settle figures on");
  ClusterDescription settled = probes.back();
  settled.calibration = {};
  TopologyDesc& topology = settled.topology;
  topology.reduce_Bps = median_of(probes, [](const TopologyDesc& t) { return t.reduce_Bps; });
  topology.memory_Bps = median_of(probes, [](const TopologyDesc& t) { return t.memory_Bps; });
  topology.cache_bytes = median_of(probes, [](const TopologyDesc& t) { return t.cache_bytes; });
  topology.intra.latency_s = median_of(probes, [](const TopologyDesc& t) { return t.intra.latency_s; });
  topology.intra.bandwidth_Bps = median_of(probes, [](const TopologyDesc& t) { return t.intra.bandwidth_Bps; });
  topology.inter.latency_s = median_of(probes, [](const TopologyDesc& t) { return t.inter.latency_s; });
  topology.inter.bandwidth_Bps = median_of(probes, [](const TopologyDesc& t) { return t.inter.bandwidth_Bps; });
  topology.copy.points = settled_points(probes, [](const TopologyDesc& t) -> const Points& { return t.copy.points; });
  topology.cross_read.points =
      settled_points(probes, [](const TopologyDesc& t) -> const Points& { return t.cross_read.points; });
  topology.local_copy.points =
      settled_points(probes, [](const TopologyDesc& t) -> const Points& { return t.local_copy.points; });
  topology.intra_message =
      settled_points(probes, [](const TopologyDesc& t) -> const Points& { return t.intra_message; });
  return settled;
}

}  // namespace strata::comm
