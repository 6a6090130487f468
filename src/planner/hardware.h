#pragma once
// Hardware and cluster descriptions for planning: what one device computes and
// holds, and how devices talk inside a node and between nodes. Read from TOML
// files (configs/clusters/*.toml) or derived from a calibrated profile.
//
//   [cluster]
//   name = "DGX A100 80GB"
//   nodes = 1                       # integer >= 1
//   devices_per_node = 8            # integer >= 1
//   [device]
//   name = "A100-SXM4-80GB"
//   memory_gib = 80                 # capacity
//   reserved_gib = 5                # never available to the model (runtime, allocator slack)
//   memory_bandwidth_gbps = 2039    # GB/s
//   memory_efficiency = 0.8         # fraction of that bandwidth element-wise kernels reach
//   op_overhead_us = 4              # fixed cost of launching one kernel
//   [device.bf16]                   # one table per dtype the device computes in: f32, bf16, f16, f64
//   matrix_tflops = 312             # dense matrix-unit peak
//   vector_tflops = 78              # non-matrix peak (element-wise arithmetic)
//   gemm_efficiency = [[1e9, 0.3], [1e12, 0.8]]       # [FLOPs per call, fraction of matrix peak]
//   attention_efficiency = [[1e7, 0.2], [1e9, 0.6]]   # fused attention, by FLOPs per (row, head)
//                                   # a dtype only the vector units compute (the optimizer's f32 on an NPU
//                                   # whose matrix engine lacks f32) lists vector_tflops alone: its
//                                   # element-wise work is priced, but no plan computes in it
//   [device.bf16.op_efficiency]     # optional, per op: the time the figures above predict over the real
//                                   # time (default 1; above 1 when the data stays in cache)
//   layernorm_backward = 0.5
//   [intra_node]                    # device to device inside a node, one direction, all devices busy
//   bandwidth_gbps = 240
//   latency_us = 8
//   [inter_node]                    # required when nodes > 1
//   nics_per_node = 8               # the node's network ports; devices share them evenly
//   nic_bandwidth_gbps = 25         # one port, one direction
//   latency_us = 15
//
// GB/s is 1e9 bytes per second; GiB is 2^30 bytes. Unknown keys, missing
// figures, wrong types and nonsense values are errors naming the file and key.
// A cluster file written by `strata calibrate` has [cluster] name and, instead
// of the rest, a [measured] table (planner/profile.h) from which the device of
// each split of the machine into processes x threads is derived.
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/toml_reader.h"

namespace strata {

// Fraction of peak reached as a function of the work in one call, linear in
// log(FLOPs) between points and flat beyond the ends.
struct EfficiencyCurve {
  std::vector<std::pair<double, double>> points;  // (FLOPs per call, fraction), FLOPs increasing
  double at(double flops) const;
};

struct DTypePerformance {
  double matrix_flops = 0;                      // FLOP/s; 0: the vector units only (no GEMMs in this dtype)
  double vector_flops = 0;                      // FLOP/s
  EfficiencyCurve gemm;                         // by FLOPs per call
  EfficiencyCurve attention;                    // by FLOPs per (batch row, head): sequence length and head size decide
  std::map<std::string, double> op_efficiency;  // predicted time / real time, by op name; absent: 1
};

struct DeviceSpec {
  std::string name;
  double memory_bytes = 0;
  double reserved_bytes = 0;
  double memory_bandwidth_Bps = 0;
  double memory_efficiency = 1;
  double op_overhead_s = 0;
  std::map<DType, DTypePerformance> dtypes;

  double usable_memory_bytes() const { return memory_bytes - reserved_bytes; }
  // Whether plans can compute in `dtype` (its matrix engine has figures for it).
  bool computes(DType dtype) const { return dtypes.count(dtype) != 0 && dtypes.at(dtype).matrix_flops > 0; }
  const DTypePerformance& performance(DType dtype) const;  // throws naming the device and dtype
};

struct LinkSpec {
  double latency_s = 0;
  double bandwidth_Bps = 0;  // one direction
};

struct ClusterSpec {
  std::string name;
  std::string source;  // the file (or profile) it came from, for messages
  int nodes = 1;
  int devices_per_node = 1;
  DeviceSpec device;
  LinkSpec intra_node;  // per device
  LinkSpec nic;         // per network port
  int nics_per_node = 0;
  // fp32 bytes one device combines per second in a reduction (one operand
  // stream); 0: a third of its memory bandwidth (read two, write one).
  double reduce_Bps = 0;

  int devices() const { return nodes * devices_per_node; }
  double node_network_Bps() const { return nic.bandwidth_Bps * nics_per_node; }
  // Throws naming `source` and the key of the first nonsense figure.
  void validate() const;
};

ClusterSpec parse_cluster(const std::string& toml_text, const std::string& source);
ClusterSpec read_cluster(const TomlReader& fields);  // an already parsed file
ClusterSpec load_cluster(const std::filesystem::path& path);

}  // namespace strata
