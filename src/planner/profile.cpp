#include "planner/profile.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_file.h"

namespace strata {

namespace {

constexpr const char* kFormat = "strata-hardware-profile";
constexpr int kVersion = 1;

nlohmann::json samples_json(const std::vector<KernelSample>& samples) {
  nlohmann::json list = nlohmann::json::array();
  for (const KernelSample& s : samples) {
    list.push_back({{"op", s.op}, {"dims", s.dims}, {"flops", s.flops}, {"seconds", s.seconds}});
  }
  return list;
}

// Reads a JSON value, failing with the file and the path inside it.
template <typename T>
T read(const nlohmann::json& json, const std::string& key, const std::string& where) {
  if (!json.is_object() || !json.contains(key)) fail("{}: missing '{}'", where, key);
  try {
    return json.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: '{}' has the wrong type", where, key);
  }
}

double positive(const nlohmann::json& json, const std::string& key, const std::string& where) {
  double value = read<double>(json, key, where);
  if (!(value > 0) || !std::isfinite(value)) fail("{}: '{}' must be positive, got {}", where, key, value);
  return value;
}

std::vector<KernelSample> read_samples(const nlohmann::json& json, const std::string& key, const std::string& where) {
  std::vector<KernelSample> samples;
  auto list = read<nlohmann::json>(json, key, where);
  if (!list.is_array()) fail("{}: '{}' must be a list", where, key);
  for (size_t i = 0; i < list.size(); ++i) {
    std::string at = fmt::format("{}.{}[{}]", where, key, i);
    KernelSample s;
    s.op = read<std::string>(list[i], "op", at);
    s.dims = read<std::vector<int64_t>>(list[i], "dims", at);
    s.flops = positive(list[i], "flops", at);
    s.seconds = positive(list[i], "seconds", at);
    samples.push_back(std::move(s));
  }
  return samples;
}

// Throughput relative to `peak` as a curve over the work `key` gives a sample;
// samples of equal work are averaged.
template <typename Key>
EfficiencyCurve curve_of(const std::vector<KernelSample>& samples, double peak, const std::string& what, Key key) {
  if (samples.empty()) fail("{}: no measurements", what);
  std::vector<std::pair<double, double>> points;
  for (const KernelSample& s : samples) points.emplace_back(key(s), std::min(1.0, s.flops / s.seconds / peak));
  std::sort(points.begin(), points.end());
  EfficiencyCurve curve;
  for (size_t i = 0; i < points.size();) {
    size_t j = i;
    double sum = 0;
    while (j < points.size() && points[j].first == points[i].first) sum += points[j++].second;
    curve.points.emplace_back(points[i].first, sum / static_cast<double>(j - i));
    i = j;
  }
  return curve;
}

}  // namespace

const ThreadProfile& HardwareProfile::for_threads(int count) const {
  for (const ThreadProfile& t : threads) {
    if (t.threads == count) return t;
  }
  std::string known;
  for (const ThreadProfile& t : threads) known += (known.empty() ? "" : ", ") + std::to_string(t.threads);
  fail("the hardware profile has no measurements for {} threads (it has: {}); rerun `strata calibrate --threads {}`",
       count, known, count);
}

nlohmann::json profile_to_json(const HardwareProfile& profile) {
  nlohmann::json threads = nlohmann::json::array();
  for (const ThreadProfile& t : profile.threads) {
    nlohmann::json dtypes = nlohmann::json::object();
    for (const auto& [dtype, d] : t.dtypes) {
      dtypes[std::string(dtype_name(dtype))] = {{"gemm", samples_json(d.gemm)},
                                                {"attention", samples_json(d.attention)},
                                                {"vector_flops", d.vector_flops},
                                                {"op_efficiency", d.op_efficiency}};
    }
    threads.push_back({{"threads", t.threads},
                       {"memory_bandwidth_Bps", t.memory_bandwidth_Bps},
                       {"op_overhead_s", t.op_overhead_s},
                       {"dtypes", dtypes}});
  }
  nlohmann::json json = {{"format", kFormat},
                         {"version", kVersion},
                         {"cpu", profile.cpu},
                         {"cores", profile.cores},
                         {"memory_bytes", profile.memory_bytes},
                         {"backend", profile.backend},
                         {"threads", threads}};
  if (profile.links) {
    const LinkProfile& l = *profile.links;
    json["links"] = {{"ranks", l.ranks},
                     {"nodes", l.nodes},
                     {"intra_latency_s", l.intra_latency_s},
                     {"intra_bandwidth_Bps", l.intra_bandwidth_Bps},
                     {"inter_latency_s", l.inter_latency_s},
                     {"inter_bandwidth_Bps", l.inter_bandwidth_Bps},
                     {"reduce_Bps", l.reduce_Bps}};
  }
  return json;
}

HardwareProfile profile_from_json(const nlohmann::json& json, const std::string& source) {
  if (read<std::string>(json, "format", source) != kFormat) fail("{}: not a Strata hardware profile", source);
  int version = read<int>(json, "version", source);
  if (version != kVersion) fail("{}: profile version {} is not the supported {}", source, version, kVersion);
  HardwareProfile profile;
  profile.cpu = read<std::string>(json, "cpu", source);
  profile.cores = read<int>(json, "cores", source);
  profile.memory_bytes = positive(json, "memory_bytes", source);
  profile.backend = read<std::string>(json, "backend", source);
  auto threads = read<nlohmann::json>(json, "threads", source);
  if (!threads.is_array() || threads.empty()) fail("{}: 'threads' must list at least one measurement", source);
  for (size_t i = 0; i < threads.size(); ++i) {
    std::string at = fmt::format("{}: threads[{}]", source, i);
    ThreadProfile t;
    t.threads = read<int>(threads[i], "threads", at);
    if (t.threads < 1) fail("{}: 'threads' must be at least 1", at);
    t.memory_bandwidth_Bps = positive(threads[i], "memory_bandwidth_Bps", at);
    t.op_overhead_s = read<double>(threads[i], "op_overhead_s", at);
    if (!(t.op_overhead_s >= 0)) fail("{}: 'op_overhead_s' must not be negative", at);
    auto dtypes = read<nlohmann::json>(threads[i], "dtypes", at);
    if (!dtypes.is_object() || dtypes.empty()) fail("{}: 'dtypes' must hold at least one dtype", at);
    for (const auto& [name, entry] : dtypes.items()) {
      std::string dat = at + ".dtypes." + name;
      DTypeProfile d;
      d.gemm = read_samples(entry, "gemm", dat);
      d.attention = read_samples(entry, "attention", dat);
      d.vector_flops = positive(entry, "vector_flops", dat);
      auto ops = read<nlohmann::json>(entry, "op_efficiency", dat);
      if (!ops.is_object()) fail("{}: 'op_efficiency' must map op names to numbers", dat);
      for (const auto& [op, value] : ops.items()) {
        d.op_efficiency[op] = positive(ops, op, dat + ".op_efficiency");
      }
      t.dtypes[parse_dtype(name)] = std::move(d);
    }
    profile.threads.push_back(std::move(t));
  }
  if (json.contains("links")) {
    const nlohmann::json& l = json.at("links");
    std::string at = source + ": links";
    LinkProfile links;
    links.ranks = read<int>(l, "ranks", at);
    links.nodes = read<int>(l, "nodes", at);
    links.intra_latency_s = read<double>(l, "intra_latency_s", at);
    links.intra_bandwidth_Bps = positive(l, "intra_bandwidth_Bps", at);
    links.inter_latency_s = read<double>(l, "inter_latency_s", at);
    links.inter_bandwidth_Bps = read<double>(l, "inter_bandwidth_Bps", at);
    links.reduce_Bps = positive(l, "reduce_Bps", at);
    profile.links = links;
  }
  return profile;
}

HardwareProfile load_profile(const std::filesystem::path& path) {
  return profile_from_json(read_json_file(path), path.string());
}

void save_profile(const std::filesystem::path& path, const HardwareProfile& profile) {
  write_file_atomic(path, profile_to_json(profile).dump(2) + "\n");
}

DTypePerformance performance_of(const DTypeProfile& measured, const std::string& what) {
  if (measured.gemm.empty()) fail("{}: no GEMM measurements", what);
  DTypePerformance perf;
  for (const KernelSample& s : measured.gemm) perf.matrix_flops = std::max(perf.matrix_flops, s.flops / s.seconds);
  perf.vector_flops = measured.vector_flops;
  perf.gemm = curve_of(measured.gemm, perf.matrix_flops, what + " GEMM", [](const KernelSample& s) { return s.flops; });
  perf.attention = curve_of(measured.attention, perf.matrix_flops, what + " attention", [&](const KernelSample& s) {
    if (s.dims.size() != 4) fail("{}: attention sample dims must be batch, seq, width, heads", what);
    return s.flops / static_cast<double>(s.dims[0] * s.dims[3]);
  });
  perf.op_efficiency = measured.op_efficiency;
  return perf;
}

ClusterSpec cluster_from_profile(const HardwareProfile& profile, int threads, int devices, const std::string& source) {
  if (devices < 1) fail("{}: devices must be at least 1, got {}", source, devices);
  const ThreadProfile& measured = profile.for_threads(threads);
  // More threads than cores (e.g. 4 ranks of 1 thread on 2 cores): the processes share the cores,
  // so each runs at that share of the rates measured with the cores to itself.
  const double share = std::min(1.0, static_cast<double>(profile.cores) / (static_cast<double>(devices) * threads));
  ClusterSpec cluster;
  cluster.name = fmt::format("this machine ({}; {} device(s) of {} thread(s){})", profile.cpu, devices, threads,
                             share < 1 ? fmt::format(", oversubscribed: {:.0f}% of the measured rates", 100 * share)
                                       : "");
  cluster.source = source;
  cluster.nodes = 1;
  cluster.devices_per_node = devices;
  DeviceSpec& device = cluster.device;
  device.name = fmt::format("{} x{} threads", profile.cpu, threads);
  device.memory_bytes = profile.memory_bytes / devices;
  device.reserved_bytes = 0.1 * device.memory_bytes;  // the operating system and everything else running
  device.memory_bandwidth_Bps = measured.memory_bandwidth_Bps * share;
  device.memory_efficiency = 1.0;  // measured through the kernels themselves
  device.op_overhead_s = measured.op_overhead_s;
  for (const auto& [dtype, d] : measured.dtypes) {
    DTypePerformance performance = performance_of(d, fmt::format("{}: {} threads, {}", source, threads, dtype_name(dtype)));
    performance.matrix_flops *= share;
    performance.vector_flops *= share;
    device.dtypes[dtype] = std::move(performance);
  }
  if (devices > 1) {
    if (!profile.links) {
      fail("{}: planning for {} processes needs measured links; run `mpirun -np 2 strata calibrate --links --out {}`",
           source, devices, source);
    }
    cluster.intra_node = {profile.links->intra_latency_s, profile.links->intra_bandwidth_Bps};
    cluster.reduce_Bps = profile.links->reduce_Bps;
  }
  cluster.validate();
  return cluster;
}

}  // namespace strata
