#include "planner/hardware.h"

#include <cmath>

#include "core/error.h"
#include "core/file_io.h"
#include "core/toml_reader.h"
#include "ops/schema.h"

namespace strata {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kGB = 1e9;

EfficiencyCurve read_curve(const TomlReader& fields, const std::string& key) {
  EfficiencyCurve curve;
  curve.points = fields.curve(key, "flops", "fraction");
  if (curve.points.empty()) fields.fail_key(key, "must list at least one [flops, fraction] pair");
  for (size_t i = 0; i < curve.points.size(); ++i) {
    double fraction = curve.points[i].second;
    if (!(fraction > 0 && fraction <= 1)) {
      fields.fail_key(key, fmt::format("entry {}: fraction of peak must be in (0, 1], got {}", i, fraction));
    }
  }
  return curve;
}

DTypePerformance read_dtype(const TomlReader& fields) {
  fields.only({"matrix_tflops", "vector_tflops", "gemm_efficiency", "attention_efficiency", "op_efficiency"});
  DTypePerformance perf;
  perf.vector_flops = fields.positive("vector_tflops") * 1e12;
  // A dtype only the vector units compute (f32 on an NPU whose matrix engine lacks it) has no matrix figures.
  if (fields.has("matrix_tflops") || fields.has("gemm_efficiency") || fields.has("attention_efficiency")) {
    perf.matrix_flops = fields.positive("matrix_tflops") * 1e12;
    perf.gemm = read_curve(fields, "gemm_efficiency");
    perf.attention = read_curve(fields, "attention_efficiency");
  }
  TomlReader ops = fields.table("op_efficiency", false);
  for (const std::string& op : ops.keys()) {
    if (!OpRegistry::global().contains(op)) ops.fail_key(op, "is not an op");
    perf.op_efficiency[op] = ops.positive(op);
  }
  return perf;
}

DeviceSpec read_device(const TomlReader& fields) {
  const std::set<std::string> dtype_names = {"f64", "f32", "bf16", "f16"};
  std::set<std::string> allowed = {
      "name", "memory_gib", "reserved_gib", "memory_bandwidth_gbps", "memory_efficiency", "op_overhead_us"};
  allowed.insert(dtype_names.begin(), dtype_names.end());
  fields.only(allowed);
  DeviceSpec device;
  device.name = fields.non_empty_string("name");
  device.memory_bytes = fields.positive("memory_gib") * kGiB;
  device.reserved_bytes = fields.non_negative("reserved_gib") * kGiB;
  if (device.reserved_bytes >= device.memory_bytes) {
    fields.fail_range("reserved_gib", fmt::format("less than memory_gib ({})", device.memory_bytes / kGiB),
                      device.reserved_bytes / kGiB);
  }
  device.memory_bandwidth_Bps = fields.positive("memory_bandwidth_gbps") * kGB;
  device.memory_efficiency = fields.fraction("memory_efficiency");
  device.op_overhead_s = fields.non_negative("op_overhead_us") * 1e-6;
  for (const std::string& name : dtype_names) {
    if (fields.has(name)) device.dtypes[parse_dtype(name)] = read_dtype(fields.table(name));
  }
  if (device.dtypes.empty()) {
    fail("{}: [device] lists no dtype table such as [device.bf16] or [device.f32]", fields.source());
  }
  return device;
}

LinkSpec read_link(const TomlReader& fields, const std::string& bandwidth_key) {
  LinkSpec link;
  link.bandwidth_Bps = fields.positive(bandwidth_key) * kGB;
  link.latency_s = fields.non_negative("latency_us") * 1e-6;
  return link;
}

}  // namespace

double EfficiencyCurve::at(double flops) const {
  STRATA_CHECK(!points.empty(), "empty efficiency curve");
  if (flops <= points.front().first) return points.front().second;
  if (flops >= points.back().first) return points.back().second;
  for (size_t i = 1; i < points.size(); ++i) {
    if (flops <= points[i].first) {
      auto [x0, y0] = points[i - 1];
      auto [x1, y1] = points[i];
      double t = (std::log(flops) - std::log(x0)) / (std::log(x1) - std::log(x0));
      return y0 + t * (y1 - y0);
    }
  }
  return points.back().second;
}

const DTypePerformance& DeviceSpec::performance(DType dtype) const {
  auto found = dtypes.find(dtype);
  if (found == dtypes.end()) {
    std::string known;
    for (const auto& [d, perf] : dtypes) known += (known.empty() ? "" : ", ") + std::string(dtype_name(d));
    fail("device '{}' has no figures for dtype {} (it lists: {})", name, dtype_name(dtype), known);
  }
  return found->second;
}

void ClusterSpec::validate() const {
  auto positive = [&](const char* key, double value) {
    if (!(value > 0) || !std::isfinite(value)) fail("{}: {} must be positive, got {}", source, key, value);
  };
  if (nodes < 1) fail("{}: cluster.nodes must be at least 1, got {}", source, nodes);
  if (devices_per_node < 1) fail("{}: cluster.devices_per_node must be at least 1, got {}", source, devices_per_node);
  positive("device.memory", device.usable_memory_bytes());
  positive("device.memory_bandwidth", device.memory_bandwidth_Bps);
  if (devices_per_node > 1) positive("intra_node.bandwidth", intra_node.bandwidth_Bps);
  if (nodes > 1) {
    positive("inter_node.nic_bandwidth", nic.bandwidth_Bps);
    if (nics_per_node < 1) fail("{}: inter_node.nics_per_node must be at least 1, got {}", source, nics_per_node);
  }
  if (device.dtypes.empty()) fail("{}: the device lists no dtype", source);
}

ClusterSpec parse_cluster(const std::string& toml_text, const std::string& source) {
  return read_cluster(TomlReader::parse(toml_text, source));
}

ClusterSpec read_cluster(const TomlReader& fields) {
  const std::string& source = fields.source();
  if (fields.has("measured")) {
    fail("{}: a calibrated cluster file ([measured]) describes this machine per processes x threads; read it "
         "through the planner's resolve_cluster",
         source);
  }
  fields.only({"cluster", "device", "intra_node", "inter_node"});

  ClusterSpec spec;
  spec.source = source;
  TomlReader cluster = fields.table("cluster");
  cluster.only({"name", "nodes", "devices_per_node"});
  spec.name = cluster.non_empty_string("name");
  spec.nodes = static_cast<int>(cluster.integer("nodes", 1));
  spec.devices_per_node = static_cast<int>(cluster.integer("devices_per_node", 1));

  spec.device = read_device(fields.table("device"));

  TomlReader intra = fields.table("intra_node", spec.devices_per_node > 1);
  if (spec.devices_per_node > 1 || intra.has("bandwidth_gbps")) {
    intra.only({"bandwidth_gbps", "latency_us"});
    spec.intra_node = read_link(intra, "bandwidth_gbps");
  }
  TomlReader inter = fields.table("inter_node", spec.nodes > 1);
  if (spec.nodes > 1 || inter.has("nic_bandwidth_gbps")) {
    inter.only({"nics_per_node", "nic_bandwidth_gbps", "latency_us"});
    spec.nics_per_node = static_cast<int>(inter.integer("nics_per_node", 1));
    spec.nic = read_link(inter, "nic_bandwidth_gbps");
  }
  spec.validate();
  return spec;
}

ClusterSpec load_cluster(const std::filesystem::path& path) {
  return parse_cluster(read_text_file(path), path.string());
}

}  // namespace strata
