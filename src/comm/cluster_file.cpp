#include "comm/cluster_file.h"

#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "core/file_io.h"
#include "core/toml_reader.h"

namespace strata::comm {
namespace {

constexpr double kGiga = 1e9;
constexpr double kMicro = 1e-6;
constexpr double kMebi = 1024.0 * 1024.0;
constexpr int64_t kMaxCount = int64_t{1} << 24;

LinkLevel read_link(const TomlReader& link) {
  link.only({"latency_us", "bandwidth_gbps"});
  return {link.non_negative("latency_us") * kMicro, link.positive("bandwidth_gbps") * kGiga};
}

Calibration read_calibration(const TomlReader& entry) {
  entry.only({"latency_scale", "bandwidth_scale", "size_factors"});
  Calibration calibration;
  calibration.latency_scale = entry.positive("latency_scale");
  calibration.bandwidth_scale = entry.positive("bandwidth_scale");
  if (entry.has("size_factors")) {
    calibration.size_factors = entry.curve("size_factors", "bytes", "factor");
    for (size_t i = 0; i < calibration.size_factors.size(); ++i) {
      double factor = calibration.size_factors[i].second;
      if (!(factor > 0)) {
        entry.fail_key("size_factors", fmt::format("entry {}: factor must be positive, got {}", i, factor));
      }
    }
  }
  return calibration;
}

// `key = [[bytes, value], ...]`, values positive, in `unit` (named in errors) times `scale` each.
std::vector<std::pair<double, double>> read_points(const TomlReader& root, const std::string& key, const char* unit,
                                                   double scale) {
  std::vector<std::pair<double, double>> points;
  for (auto [bytes, value] : root.curve(key, "bytes", unit)) {
    if (!(value > 0)) root.fail_key(key, fmt::format("at {} bytes: {} must be positive, got {}", bytes, unit, value));
    points.emplace_back(bytes, value * scale);
  }
  return points;
}

}  // namespace

ClusterDescription parse_cluster_description(std::string_view text, const std::string& source_name) {
  TomlReader root = TomlReader::parse(text, source_name);
  root.only({"nodes", "ranks_per_node", "reduce_gbps", "memory_gbps", "cache_mib", "local_copy_gbps", "copy_gbps",
             "cross_read_gbps", "intra_message_us", "probe_key", "shared_memory", "intra", "inter", "calibration"});
  ClusterDescription description;
  TopologyDesc& topology = description.topology;
  topology.nodes = static_cast<int>(root.integer("nodes", 1, kMaxCount));
  topology.ranks_per_node = static_cast<int>(root.integer("ranks_per_node", 1, kMaxCount));
  topology.reduce_Bps = root.positive("reduce_gbps") * kGiga;
  topology.intra = read_link(root.table("intra"));
  topology.inter = topology.nodes > 1 || root.has("inter") ? read_link(root.table("inter")) : topology.intra;
  if (root.has("shared_memory")) topology.shared_memory = topology.cross_memory = root.boolean("shared_memory");
  if (root.has("memory_gbps")) topology.memory_Bps = root.positive("memory_gbps") * kGiga;
  if (root.has("cache_mib")) topology.cache_bytes = root.positive("cache_mib") * kMebi;
  if (root.has("local_copy_gbps")) topology.local_copy.points = read_points(root, "local_copy_gbps", "GB/s", kGiga);
  if (root.has("copy_gbps")) topology.copy.points = read_points(root, "copy_gbps", "GB/s", kGiga);
  if (root.has("cross_read_gbps")) topology.cross_read.points = read_points(root, "cross_read_gbps", "GB/s", kGiga);
  if (root.has("intra_message_us")) topology.intra_message = read_points(root, "intra_message_us", "us", kMicro);
  if (root.has("probe_key")) description.probe_key = root.string("probe_key");
  TomlReader calibration = root.table("calibration", false);
  std::set<std::string> names;
  for (Algorithm algorithm : kConcreteAlgorithms) {
    if (modeled(algorithm)) names.emplace(algorithm_name(algorithm));
  }
  calibration.only(names);
  for (Algorithm algorithm : kConcreteAlgorithms) {
    std::string name(algorithm_name(algorithm));
    if (!calibration.has(name)) continue;
    description.calibration[static_cast<size_t>(algorithm)] = read_calibration(calibration.table(name));
  }
  topology.validate(source_name);
  return description;
}

ClusterDescription load_cluster_description(const std::filesystem::path& path) {
  return parse_cluster_description(read_text_file(path), path.string());
}

std::string format_cluster_description(const ClusterDescription& description) {
  const TopologyDesc& topology = description.topology;
  // Seventeen significant digits so a saved description reads back exactly.
  auto number = [](double value) { return fmt::format("{:.17g}", value); };
  std::ostringstream out;
  out << "# Strata cluster description (GB/s = 1e9 bytes/s)\n";
  out << "nodes = " << topology.nodes << "\n";
  out << "ranks_per_node = " << topology.ranks_per_node << "\n";
  out << "reduce_gbps = " << number(topology.reduce_Bps / kGiga) << "\n";
  if (topology.memory_Bps > 0.0) out << "memory_gbps = " << number(topology.memory_Bps / kGiga) << "\n";
  if (topology.cache_bytes > 0.0) out << "cache_mib = " << number(topology.cache_bytes / kMebi) << "\n";
  // `key = [[bytes, value / scale], ...]`, nothing when there are no points.
  auto points = [&](const char* key, const std::vector<std::pair<double, double>>& list, double scale) {
    if (list.empty()) return;
    out << key << " = [";
    for (size_t i = 0; i < list.size(); ++i) {
      out << (i ? ", " : "") << "[" << number(list[i].first) << ", " << number(list[i].second / scale) << "]";
    }
    out << "]\n";
  };
  points("copy_gbps", topology.copy.points, kGiga);
  points("cross_read_gbps", topology.cross_read.points, kGiga);
  points("local_copy_gbps", topology.local_copy.points, kGiga);
  points("intra_message_us", topology.intra_message, kMicro);
  if (topology.shared_memory) out << "shared_memory = true\n";
  if (!description.probe_key.empty()) {
    out << "probe_key = " << toml::value<std::string>(description.probe_key) << "\n";
  }
  auto link = [&](const char* name, const LinkLevel& level) {
    out << "\n[" << name << "]\n";
    out << "latency_us = " << number(level.latency_s / kMicro) << "\n";
    out << "bandwidth_gbps = " << number(level.bandwidth_Bps / kGiga) << "\n";
  };
  link("intra", topology.intra);
  link("inter", topology.inter);
  for (Algorithm algorithm : kConcreteAlgorithms) {
    const Calibration& calibration = description.calibration[static_cast<size_t>(algorithm)];
    if (!modeled(algorithm) || calibration.is_identity()) continue;
    out << "\n[calibration." << algorithm_name(algorithm) << "]\n";
    out << "latency_scale = " << number(calibration.latency_scale) << "\n";
    out << "bandwidth_scale = " << number(calibration.bandwidth_scale) << "\n";
    points("size_factors", calibration.size_factors, 1.0);
  }
  return out.str();
}

void save_cluster_description(const std::filesystem::path& path, const ClusterDescription& description) {
  write_file_atomic(path, format_cluster_description(description));
}

}  // namespace strata::comm
