#pragma once
// Small clusters for planner tests, described in the same TOML users write.
#include <fmt/format.h>

#include <string>

#include "planner/hardware.h"

namespace strata::testing {

// A made-up f32 device: 10 TFLOP/s matrix, 1 TFLOP/s vector, 100 GB/s memory.
inline ClusterSpec test_cluster(int nodes, int devices_per_node, double memory_gib, double nic_gbps = 10,
                                double intra_gbps = 100) {
  std::string text = fmt::format(R"(
[cluster]
name = "test"
nodes = {}
devices_per_node = {}
[device]
name = "unit"
memory_gib = {}
reserved_gib = 0
memory_bandwidth_gbps = 100
memory_efficiency = 1
op_overhead_us = 0
[device.f32]
matrix_tflops = 10
vector_tflops = 1
gemm_efficiency = [[1e6, 0.5], [1e9, 1.0]]
attention_efficiency = [[1e4, 0.5]]
[intra_node]
bandwidth_gbps = {}
latency_us = 1
[inter_node]
nics_per_node = 1
nic_bandwidth_gbps = {}
latency_us = 5
)",
                                 nodes, devices_per_node, memory_gib, intra_gbps, nic_gbps);
  return parse_cluster(text, "test.toml");
}

inline std::string preset_path(const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/configs/clusters/" + name + ".toml";
}

}  // namespace strata::testing
