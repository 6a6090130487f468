#include "planner/profile.h"

#include <algorithm>
#include <cmath>
#include <charconv>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/toml_reader.h"
#include "planner/engine_fit.h"

namespace strata {

namespace {

constexpr double kTera = 1e12;
constexpr double kMicro = 1e-6;
const std::vector<std::string> kGemmColumns = {"m", "n", "k", "transpose_a", "transpose_b", "flops", "seconds"};
const std::vector<std::string> kAttentionColumns = {"batch", "seq", "width", "heads", "flops", "seconds"};

toml::array rows_of(const std::vector<KernelSample>& samples) {
  toml::array rows;
  for (const KernelSample& s : samples) {
    toml::array row;
    for (int64_t dim : s.dims) row.push_back(dim);
    row.push_back(s.flops);
    row.push_back(s.seconds);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<KernelSample> samples_of(const TomlReader& table, const std::string& key, const std::string& op,
                                     const std::vector<std::string>& columns) {
  std::vector<KernelSample> samples;
  const size_t dims = columns.size() - 2;
  for (const std::vector<double>& row : table.rows(key, columns)) {
    KernelSample s{op, {}, row[dims], row[dims + 1]};
    for (size_t i = 0; i < dims; ++i) {
      if (!(row[i] >= 0) || row[i] != std::floor(row[i])) table.fail_key(key, fmt::format("{} must be a count", columns[i]));
      s.dims.push_back(static_cast<int64_t>(row[i]));
    }
    if (!(s.flops > 0) || !(s.seconds > 0)) table.fail_key(key, "FLOPs and seconds must be positive");
    samples.push_back(std::move(s));
  }
  return samples;
}

// The cpu backend's structure: a core is a compute unit; oneDNN's GEMM blocks
// the output in 64 x 64 panels per thread and streams k in 16-element (one
// AVX-512 register of f32) steps; the fused attention kernel works on blocks
// of 64 query rows with head dims in 16-element steps.
DTypePerformance cpu_engine_structure(int threads) {
  DTypePerformance perf;
  perf.gemm.compute_units = threads;
  perf.gemm.tiles = {{64, 64, 1.0}};
  perf.gemm.k_step = 16;
  perf.gemm.alignment = {{16, 1.0}, {1, 1.0}};
  perf.attention.block_rows = 64;
  perf.attention.head_dim_step = 16;
  return perf;
}

}  // namespace

const ThreadProfile& HardwareProfile::for_threads(int count) const {
  for (const ThreadProfile& t : threads) {
    if (t.threads == count) return t;
  }
  std::string known;
  for (const ThreadProfile& t : threads) known += (known.empty() ? "" : ", ") + std::to_string(t.threads);
  fail("the calibrated cluster file has no measurements for {} threads (it has: {}); rerun `strata calibrate --threads {}`",
       count, known, count);
}

std::string format_measured_cluster(const HardwareProfile& profile) {
  toml::table threads;
  for (const ThreadProfile& t : profile.threads) {
    toml::table entry{{"memory_bandwidth_gbps", t.memory_bandwidth_Bps / kGB}, {"op_overhead_us", t.op_overhead_s / kMicro}};
    for (const auto& [dtype, d] : t.dtypes) {
      toml::table ops;
      for (const auto& [op, value] : d.op_efficiency) ops.insert(op, value);
      entry.insert(std::string(dtype_name(dtype)), toml::table{{"vector_tflops", d.vector_flops / kTera},
                                                               {"gemm", rows_of(d.gemm)},
                                                               {"attention", rows_of(d.attention)},
                                                               {"op_efficiency", std::move(ops)}});
    }
    threads.insert(std::to_string(t.threads), std::move(entry));
  }
  toml::table measured{{"cpu", profile.cpu},
                       {"cores", profile.cores},
                       {"memory_gib", profile.memory_bytes / kGiB},
                       {"backend", profile.backend},
                       {"threads", std::move(threads)}};
  if (profile.links) {
    const LinkProfile& l = *profile.links;
    measured.insert("links", toml::table{{"processes", l.ranks},
                                         {"nodes", l.nodes},
                                         {"intra_latency_us", l.intra_latency_s / kMicro},
                                         {"intra_bandwidth_gbps", l.intra_bandwidth_Bps / kGB},
                                         {"inter_latency_us", l.inter_latency_s / kMicro},
                                         {"inter_bandwidth_gbps", l.inter_bandwidth_Bps / kGB},
                                         {"reduce_gbps", l.reduce_Bps / kGB}});
  }
  toml::table file{{"cluster", toml::table{{"name", fmt::format("this machine ({}, calibrated)", profile.cpu)}}},
                   {"measured", std::move(measured)}};
  std::ostringstream text;
  text << "# A cluster description (the format of configs/clusters/) written by `strata calibrate`: the\n"
          "# device is measured here instead of given per dtype. [measured.threads.N] holds what one process\n"
          "# of N threads reached: GEMMs as [m, n, k, transpose_a, transpose_b, FLOPs, seconds], attention as\n"
          "# [batch, seq, width, heads, FLOPs, seconds], element-wise peak, memory bandwidth, per-op overhead and\n"
          "# per-op efficiency in a training graph; the planner derives the device of each split of this\n"
          "# machine into processes x threads from them. [measured.links]: collectives between processes.\n\n"
       << file << "\n";
  return text.str();
}

bool is_measured_cluster(const TomlReader& file) { return file.has("measured"); }

HardwareProfile read_measured_cluster(const TomlReader& file) {
  file.only({"cluster", "measured"});
  TomlReader cluster = file.table("cluster");
  cluster.only({"name"});
  cluster.non_empty_string("name");
  TomlReader measured = file.table("measured");
  measured.only({"cpu", "cores", "memory_gib", "backend", "threads", "links"});
  HardwareProfile profile;
  profile.cpu = measured.non_empty_string("cpu");
  profile.cores = static_cast<int>(measured.integer("cores", 1));
  profile.memory_bytes = measured.positive("memory_gib") * kGiB;
  profile.backend = measured.non_empty_string("backend");
  TomlReader threads = measured.table("threads");
  std::vector<std::string> counts = threads.keys();
  if (counts.empty()) measured.fail_key("threads", "must hold at least one [measured.threads.N] table");
  for (const std::string& count : counts) {
    ThreadProfile t;
    const char* end = count.data() + count.size();
    if (std::from_chars(count.data(), end, t.threads).ptr != end || t.threads < 1) {
      threads.fail_key(count, "must be named by a thread count (an integer >= 1)");
    }
    TomlReader entry = threads.table(count);
    entry.only({"memory_bandwidth_gbps", "op_overhead_us", "f64", "f32", "bf16", "f16"});
    t.memory_bandwidth_Bps = entry.positive("memory_bandwidth_gbps") * kGB;
    t.op_overhead_s = entry.non_negative("op_overhead_us") * kMicro;
    for (DType dtype : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
      const std::string name(dtype_name(dtype));
      if (!entry.has(name)) continue;
      TomlReader table = entry.table(name);
      table.only({"vector_tflops", "gemm", "attention", "op_efficiency"});
      DTypeProfile d;
      d.vector_flops = table.positive("vector_tflops") * kTera;
      d.gemm = samples_of(table, "gemm", "matmul", kGemmColumns);
      d.attention = samples_of(table, "attention", "attention", kAttentionColumns);
      TomlReader ops = table.table("op_efficiency");
      for (const std::string& op : ops.keys()) d.op_efficiency[op] = ops.positive(op);
      t.dtypes[dtype] = std::move(d);
    }
    if (t.dtypes.empty()) threads.fail_key(count, "measures no dtype");
    profile.threads.push_back(std::move(t));
  }
  std::sort(profile.threads.begin(), profile.threads.end(),
            [](const ThreadProfile& a, const ThreadProfile& b) { return a.threads < b.threads; });
  if (measured.has("links")) {
    TomlReader l = measured.table("links");
    l.only({"processes", "nodes", "intra_latency_us", "intra_bandwidth_gbps", "inter_latency_us",
            "inter_bandwidth_gbps", "reduce_gbps"});
    LinkProfile links;
    links.ranks = static_cast<int>(l.integer("processes", 2));
    links.nodes = static_cast<int>(l.integer("nodes", 1));
    links.intra_latency_s = l.non_negative("intra_latency_us") * kMicro;
    links.intra_bandwidth_Bps = l.positive("intra_bandwidth_gbps") * kGB;
    links.inter_latency_s = l.non_negative("inter_latency_us") * kMicro;
    links.inter_bandwidth_Bps = l.non_negative("inter_bandwidth_gbps") * kGB;
    links.reduce_Bps = l.positive("reduce_gbps") * kGB;
    profile.links = links;
  }
  return profile;
}

HardwareProfile load_profile(const std::filesystem::path& path) {
  if (path.extension() == ".json") {
    fail("'{}' is a hardware profile of an older `strata calibrate` (JSON); calibrated machines are cluster files "
         "now: rerun `strata calibrate --out {}`",
         path.string(), std::filesystem::path(path).replace_extension(".toml").string());
  }
  TomlReader file = TomlReader::parse(read_text_file(path), path.string());
  if (!is_measured_cluster(file)) {
    fail("'{}' holds no [measured] table: it is not a cluster file written by `strata calibrate`", path.string());
  }
  return read_measured_cluster(file);
}

void save_profile(const std::filesystem::path& path, const HardwareProfile& profile) {
  write_file_atomic(path, format_measured_cluster(profile));
}

DTypePerformance performance_of(const DTypeProfile& measured, int threads, double op_overhead_s,
                                const std::string& what) {
  if (measured.gemm.empty()) fail("{}: no GEMM measurements", what);
  if (measured.attention.empty()) fail("{}: no attention measurements", what);
  DTypePerformance perf = cpu_engine_structure(threads);
  for (const KernelSample& s : measured.gemm) perf.matrix_flops = std::max(perf.matrix_flops, s.flops / s.seconds);
  perf.vector_flops = measured.vector_flops;
  std::vector<GemmMeasurement> gemms;
  for (const KernelSample& s : measured.gemm) {
    if (s.dims.size() != 5) fail("{}: GEMM sample dims must be m, n, k, trans_a, trans_b", what);
    gemms.push_back({{1, s.dims[0], s.dims[1], s.dims[2]}, s.seconds});
  }
  fit_gemm_engine(perf, gemms, op_overhead_s);
  std::vector<AttentionMeasurement> attention;
  for (const KernelSample& s : measured.attention) {
    if (s.dims.size() != 4) fail("{}: attention sample dims must be batch, seq, width, heads", what);
    attention.push_back({{s.dims[0] * s.dims[3], s.dims[1], s.dims[2] / s.dims[3], false}, s.flops, s.seconds});
  }
  fit_attention_engine(perf, attention, op_overhead_s);
  perf.op_efficiency = measured.op_efficiency;
  return perf;
}

namespace {

// Every figure of a calibrated device (and its links) was measured on this machine; the memory size and what is
// reserved of it do not price time.
void record_measured_sources(ClusterSpec& cluster) {
  const std::string measured = fmt::format("measured by `strata calibrate` ({})", cluster.source);
  for (const char* key : {"memory_bandwidth_gbps", "memory_efficiency", "op_overhead_us"}) {
    cluster.figure_sources[std::string("device.") + key] = measured;
  }
  const char* engine_keys[] = {"matrix_tflops",       "vector_tflops",        "compute_units",
                               "gemm_tiles",          "gemm_k_step",          "gemm_tile_overhead_us",
                               "gemm_alignment",      "attention_efficiency", "attention_backward_efficiency",
                               "attention_block_rows", "attention_head_dim_step", "attention_tile_overhead_us"};
  for (const auto& [dtype, performance] : cluster.device.dtypes) {
    for (const char* key : engine_keys) {
      cluster.figure_sources[fmt::format("device.{}.{}", dtype_name(dtype), key)] = measured;
    }
  }
  if (cluster.devices_per_node > 1) {
    cluster.figure_sources["intra_node.bandwidth_gbps"] = measured;
    cluster.figure_sources["intra_node.latency_us"] = measured;
  }
}

}  // namespace

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
    DTypePerformance performance = performance_of(d, threads, measured.op_overhead_s,
                                                  fmt::format("{}: {} threads, {}", source, threads, dtype_name(dtype)));
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
  record_measured_sources(cluster);
  cluster.validate();
  return cluster;
}

}  // namespace strata
