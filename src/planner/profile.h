#pragma once
// The hardware profile `strata calibrate` measures on this machine and `plan`
// and `train` read: GEMM and attention throughput over transformer shapes,
// element-wise throughput, memory bandwidth and per-op overhead, per thread
// count and dtype, plus the link figures of the collectives when they were
// measured with several processes. Stored as a cluster file (hardware.h's
// format) whose device is a [measured] table instead of per-dtype figures.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/toml_reader.h"
#include "planner/hardware.h"

namespace strata {

struct KernelSample {
  std::string op;             // matmul, attention
  // matmul: m, n, k as the matrix engine sees them (out [m, n] = [m, k] x [k, n]; a weight
  // gradient's k is the rows it reduces over), trans_a, trans_b; attention: batch, seq, width, heads
  std::vector<int64_t> dims;
  double flops = 0;           // per call, from the op's schema
  double seconds = 0;         // median per call
};

struct DTypeProfile {
  std::vector<KernelSample> gemm;
  std::vector<KernelSample> attention;
  double vector_flops = 0;  // element-wise arithmetic (GELU), FLOP/s
  // Every op of a training graph: the time predicted from the figures above
  // over the time measured there, by op name (corrects for shapes, cache
  // behaviour and kernels the micro-benchmarks do not cover).
  std::map<std::string, double> op_efficiency;
};

struct ThreadProfile {
  int threads = 1;
  double memory_bandwidth_Bps = 0;  // streaming add, bytes moved per second
  double op_overhead_s = 0;         // one tiny op through the dispatcher
  std::map<DType, DTypeProfile> dtypes;
};

struct LinkProfile {
  int ranks = 0;  // processes measured
  int nodes = 1;
  double intra_latency_s = 0;
  double intra_bandwidth_Bps = 0;
  double inter_latency_s = 0;  // nodes > 1 only
  double inter_bandwidth_Bps = 0;
  double reduce_Bps = 0;
};

struct HardwareProfile {
  std::string cpu;
  int cores = 1;
  double memory_bytes = 0;
  std::string backend;
  std::vector<ThreadProfile> threads;  // by increasing thread count
  std::optional<LinkProfile> links;

  const ThreadProfile& for_threads(int count) const;  // throws listing the measured counts
};

// The cluster file of a calibrated machine: [cluster] name and [measured].
std::string format_measured_cluster(const HardwareProfile& profile);
// Whether a parsed cluster file describes its device by measurements.
bool is_measured_cluster(const TomlReader& file);
// Reads one; fails naming the file and key of anything missing or wrong.
HardwareProfile read_measured_cluster(const TomlReader& file);
HardwareProfile load_profile(const std::filesystem::path& path);
void save_profile(const std::filesystem::path& path, const HardwareProfile& profile);  // atomic

// The device figures of one dtype on `threads` cores: matrix peak = the
// fastest GEMM; the GEMM and attention engines (hardware.h) with this CPU's
// structure (a core per compute unit, the cpu backend's blocking), their
// efficiencies and fixed costs fitted to the measured kernels (engine_fit.h).
DTypePerformance performance_of(const DTypeProfile& measured, int threads, double op_overhead_s,
                                const std::string& what);

// This machine as a one-node cluster of `devices` devices of `threads` threads
// each (a device per process); more than one device needs measured links.
ClusterSpec cluster_from_profile(const HardwareProfile& profile, int threads, int devices, const std::string& source);

}  // namespace strata
