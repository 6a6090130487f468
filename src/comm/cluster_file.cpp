#include "comm/cluster_file.h"

#include <cmath>
#include <optional>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "core/error.h"
#include "core/file_io.h"

namespace strata::comm {
namespace {

constexpr double kGiga = 1e9;
constexpr double kMicro = 1e-6;

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  void only_keys(const toml::table& table, const std::string& prefix, const std::set<std::string>& allowed) {
    for (auto&& [key, node] : table) {
      std::string name(key.str());
      if (!allowed.count(name)) {
        std::string expected;
        for (const auto& item : allowed) expected += (expected.empty() ? "" : ", ") + item;
        fail("{}: unknown key '{}{}' (expected one of: {})", source_, prefix, name, expected);
      }
    }
  }

  const toml::table& table(const toml::table& parent, const std::string& prefix, const std::string& key) {
    const toml::node* node = parent.get(key);
    if (!node) fail("{}: missing table [{}{}]", source_, prefix, key);
    const toml::table* result = node->as_table();
    if (!result) fail("{}: '{}{}' must be a table", source_, prefix, key);
    return *result;
  }

  double number(const toml::table& table, const std::string& prefix, const std::string& key) {
    const toml::node* node = table.get(key);
    if (!node) fail("{}: missing key '{}{}'", source_, prefix, key);
    double value;
    if (auto integer = node->value_exact<int64_t>()) {
      value = static_cast<double>(*integer);
    } else if (auto real = node->value_exact<double>()) {
      value = *real;
    } else {
      fail("{}: key '{}{}' must be a number", source_, prefix, key);
    }
    if (!std::isfinite(value)) fail("{}: key '{}{}' must be finite, got {}", source_, prefix, key, value);
    return value;
  }

  double positive(const toml::table& table, const std::string& prefix, const std::string& key) {
    double value = number(table, prefix, key);
    if (value <= 0.0) fail("{}: key '{}{}' must be > 0, got {}", source_, prefix, key, value);
    return value;
  }

  double non_negative(const toml::table& table, const std::string& prefix, const std::string& key) {
    double value = number(table, prefix, key);
    if (value < 0.0) fail("{}: key '{}{}' must be >= 0, got {}", source_, prefix, key, value);
    return value;
  }

  int count(const toml::table& table, const std::string& key) {
    const toml::node* node = table.get(key);
    if (!node) fail("{}: missing key '{}'", source_, key);
    auto integer = node->value_exact<int64_t>();
    if (!integer) fail("{}: key '{}' must be an integer", source_, key);
    if (*integer < 1 || *integer > (1 << 24)) fail("{}: key '{}' must be in [1, 2^24], got {}", source_, key, *integer);
    return static_cast<int>(*integer);
  }

  // [[bytes, factor], ...]: bytes strictly ascending, both > 0.
  std::vector<std::pair<double, double>> size_factors(const toml::table& table, const std::string& key) {
    const toml::array* points = table.get(key.substr(key.rfind('.') + 1))->as_array();
    if (!points) fail("{}: key '{}' must be an array of [bytes, factor] pairs", source_, key);
    std::vector<std::pair<double, double>> result;
    for (size_t i = 0; i < points->size(); ++i) {
      const toml::array* point = (*points)[i].as_array();
      std::optional<double> bytes, factor;
      if (point && point->size() == 2) {
        bytes = (*point)[0].value<double>();
        factor = (*point)[1].value<double>();
      }
      if (!bytes || !factor) fail("{}: {}[{}] must be a [bytes, factor] pair of numbers", source_, key, i);
      if (!(*bytes > 0.0) || !(*factor > 0.0) || !std::isfinite(*bytes) || !std::isfinite(*factor)) {
        fail("{}: {}[{}] needs bytes and factor > 0, got [{}, {}]", source_, key, i, *bytes, *factor);
      }
      if (!result.empty() && *bytes <= result.back().first) {
        fail("{}: {}[{}]: sizes must ascend ({} after {})", source_, key, i, *bytes, result.back().first);
      }
      result.emplace_back(*bytes, *factor);
    }
    return result;
  }

  LinkLevel link(const toml::table& root, const std::string& key) {
    const toml::table& section = table(root, "", key);
    std::string prefix = key + ".";
    only_keys(section, prefix, {"latency_us", "bandwidth_gbps"});
    return {non_negative(section, prefix, "latency_us") * kMicro, positive(section, prefix, "bandwidth_gbps") * kGiga};
  }

 private:
  std::string source_;
};

}  // namespace

ClusterDescription parse_cluster_description(std::string_view text, const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& error) {
    fail("{}:{}:{}: {}", source_name, error.source().begin.line, error.source().begin.column, error.description());
  }
  Reader reader(source_name);
  reader.only_keys(root, "",
                  {"nodes", "ranks_per_node", "reduce_gbps", "probe_key", "shared_memory", "intra", "inter", "calibration"});
  ClusterDescription description;
  TopologyDesc& topology = description.topology;
  topology.nodes = reader.count(root, "nodes");
  topology.ranks_per_node = reader.count(root, "ranks_per_node");
  topology.reduce_Bps = reader.positive(root, "", "reduce_gbps") * kGiga;
  topology.intra = reader.link(root, "intra");
  if (topology.nodes > 1 || root.contains("inter")) {
    topology.inter = reader.link(root, "inter");
  } else {
    topology.inter = topology.intra;
  }
  if (const toml::node* flag = root.get("shared_memory")) {
    auto value = flag->value_exact<bool>();
    if (!value) fail("{}: key 'shared_memory' must be true or false", source_name);
    topology.shared_memory = topology.cross_memory = *value;
  }
  if (const toml::node* key = root.get("probe_key")) {
    auto value = key->value_exact<std::string>();
    if (!value) fail("{}: key 'probe_key' must be a string", source_name);
    description.probe_key = *value;
  }
  if (root.contains("calibration")) {
    const toml::table& calibration = reader.table(root, "", "calibration");
    std::set<std::string> names;
    for (Algorithm algorithm : kConcreteAlgorithms) {
      if (modeled(algorithm)) names.emplace(algorithm_name(algorithm));
    }
    reader.only_keys(calibration, "calibration.", names);
    for (Algorithm algorithm : kConcreteAlgorithms) {
      std::string name(algorithm_name(algorithm));
      if (!calibration.contains(name)) continue;
      std::string prefix = "calibration." + name + ".";
      const toml::table& entry = reader.table(calibration, "calibration.", name);
      reader.only_keys(entry, prefix, {"latency_scale", "bandwidth_scale", "size_factors"});
      Calibration& target = description.calibration[static_cast<size_t>(algorithm)];
      target.latency_scale = reader.positive(entry, prefix, "latency_scale");
      target.bandwidth_scale = reader.positive(entry, prefix, "bandwidth_scale");
      if (entry.contains("size_factors")) target.size_factors = reader.size_factors(entry, prefix + "size_factors");
    }
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
    if (!calibration.size_factors.empty()) {
      out << "size_factors = [";
      for (size_t i = 0; i < calibration.size_factors.size(); ++i) {
        out << (i ? ", " : "") << "[" << number(calibration.size_factors[i].first) << ", "
            << number(calibration.size_factors[i].second) << "]";
      }
      out << "]\n";
    }
  }
  return out.str();
}

void save_cluster_description(const std::filesystem::path& path, const ClusterDescription& description) {
  write_file_atomic(path, format_cluster_description(description));
}

}  // namespace strata::comm
