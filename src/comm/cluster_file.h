#pragma once
// Cluster description files (TOML): the links of a machine we may not have,
// for planning, or the cached result of the start-up probe of one we do.
//
//   nodes = 2                  # integer >= 1
//   ranks_per_node = 8         # integer >= 1
//   reduce_gbps = 12.0         # GB/s of fp32 one rank combines (one operand stream)
//   memory_gbps = 20.0         # optional: GB/s all cores of a node copy together out of cache (memcpy)
//   cache_mib = 32             # optional: MiB of a node's cache as copies see it (the probe fits it)
//   copy_gbps = [[262144, 30.0], [8388608, 12.0]]        # optional: GB/s one rank memcpys a block of that
//                              # many bytes, all ranks of a node at once (one-host exchanges' staging)
//   cross_read_gbps = [[262144, 13.0], [8388608, 10.0]]  # optional: likewise, reading a peer's memory
//                              # (cross-memory attach); both decide whether the all-to-all stages its blocks
//   intra_message_us = [[4, 0.7], [4096, 3.0]]  # optional: microseconds one MPI message of that many
//                              # bytes takes between two ranks of a node, one way (MPI-based algorithms' steps)
//   probe_key = "..."          # optional: which launch layout a probe measured
//   shared_memory = true       # optional: ranks of a node share and read each other's memory (CPU hosts)
//   [intra]                    # rank to rank inside a node, every rank busy
//   latency_us = 0.6
//   bandwidth_gbps = 20.0
//   [inter]                    # one node's network link; required when nodes > 1
//   latency_us = 5.0
//   bandwidth_gbps = 2.0
//   [calibration.ring]         # optional, per algorithm (fitted by comm-bench --calibrate)
//   latency_scale = 1.0
//   bandwidth_scale = 1.0
//   size_factors = [[4096, 0.9], [1048576, 1.2]]   # optional: [bytes, factor], ascending
//
// GB/s means 1e9 bytes per second. Unknown keys, missing keys, wrong types and
// nonsense values are errors naming the file and the key.
#include <filesystem>
#include <string>

#include "comm/cost_model.h"

namespace strata::comm {

struct ClusterDescription {
  TopologyDesc topology;
  std::array<Calibration, kAlgorithmSlots> calibration{};
  std::string probe_key;
};

ClusterDescription load_cluster_description(const std::filesystem::path& path);
ClusterDescription parse_cluster_description(std::string_view text, const std::string& source_name);
std::string format_cluster_description(const ClusterDescription& description);
void save_cluster_description(const std::filesystem::path& path, const ClusterDescription& description);

}  // namespace strata::comm
