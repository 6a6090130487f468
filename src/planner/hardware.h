#pragma once
// Hardware and cluster descriptions for planning: what one device computes and
// holds, and how devices talk inside a node and between nodes. Read from TOML
// files (configs/clusters/*.toml) or derived from a calibrated profile.
//
//   [cluster]
//   name = "DGX A100 80GB"
//   nodes = 1                       # integer >= 1
//   devices_per_node = 8            # integer >= 1
//   collectives = "nccl"            # optional: who runs the collectives; "strata" (default: this engine,
//                                   # fp32 partial sums combined in a pass of their own), "nccl" or "hccl"
//                                   # (the data's dtype on the wire, combined as it is copied)
//   [device]                        # every figure from here on is { value = ..., source = "..." }:
//   name = "A100-SXM4-80GB"         # the datasheet, paper or measurement it comes from (a bare
//   memory_gib = 80                 # number is refused). Shown bare below for brevity. A source that
//                                   # begins "fitted by" or "measured" marks a figure measured on the device;
//                                   # one naming a datasheet, whitepaper or guide (and no assumption) the
//                                   # vendor's specification; any other is assumed, and `strata plan`'s
//                                   # step-time intervals vary it (planner/uncertainty.h).
//   reserved_gib = 5                # never available to the model (runtime, allocator slack)
//   memory_bandwidth_gbps = 2039    # GB/s
//   memory_efficiency = 0.8         # fraction of that bandwidth element-wise kernels reach
//   op_overhead_us = 4              # fixed cost of launching one kernel
//   comm_compute_slowdown = 0.1     # optional: compute slows by this fraction beside a collective
//   [device.bf16]                   # one table per dtype the device computes in: f32, bf16, f16, f64
//   matrix_tflops = { value = 312, source = "A100 datasheet, dense" }   # dense matrix-unit peak
//   sustained_matrix_tflops = { value = 260, source = "..." }  # optional: the most the engine holds
//                                   # under back-to-back GEMMs at its power limit (no GEMM runs faster)
//   vector_tflops = { value = 78, source = "..." }  # non-matrix peak (element-wise arithmetic)
//   compute_units = { value = 108, source = "..." } # SMs (cores): tiles run in waves of this many
//   gemm_tiles = { value = [[128, 256, 0.85], [128, 128, 0.8]], source = "..." }
//                                   # output tiles [rows, columns, fraction of a unit's peak] the GEMM
//                                   # library picks among (the fastest for each shape)
//   gemm_k_step = { value = 64, source = "..." }    # the reduction dimension is consumed in steps of this
//   gemm_tile_overhead_us = { value = 1, source = "..." }  # per tile and wave: prologue and epilogue
//   gemm_alignment = { value = [[8, 1.0], [2, 0.4], [1, 0.2]], source = "..." }
//                                   # [elements, efficiency] from the widest alignment down to 1: a GEMM
//                                   # runs at the first whose alignment divides its n and k
//   attention_efficiency = { value = 0.6, source = "..." }           # fused attention forward,
//   attention_backward_efficiency = { value = 0.45, source = "..." } # backward: fraction of peak
//   attention_block_rows = { value = 128, source = "..." }     # query rows per tile
//   attention_head_dim_step = { value = 32, source = "..." }   # head dims padded to a multiple of this
//   attention_head_dims = { value = [32, 64, 128], source = "..." }  # optional: the only head dims the
//                                   # kernels are built for; a head dim runs the smallest at least as large
//   attention_tile_overhead_us = { value = 2, source = "..." }
//   [device.bf16.attention_libraries.flash-triton]   # optional: another library's fused attention on
//   attention_efficiency = { value = 0.4, source = "..." }           # this device, for a run that calls
//   attention_backward_efficiency = { value = 0.3, source = "..." }  # it (`strata plan --attention-library`);
//   attention_tile_overhead_us = { value = 2, source = "..." }       # tiling and head-dim step as above,
//   attention_head_dims = { value = [32, 64, 128], source = "..." }  # its own kernels' head dims if it has them
//                                   # a dtype only the vector units compute (the optimizer's f32 on an NPU
//                                   # whose matrix engine lacks f32) lists vector_tflops alone: its
//                                   # element-wise work is priced, but no plan computes in it
//   [device.fp8]                    # optional: the float8 matrix engine float8 linears run on
//   matrix_tflops = ...             # (`strata plan --fp8`, planner/fp8_linears.h): matrix_tflops,
//                                   # sustained_matrix_tflops (optional), compute_units, gemm_tiles, gemm_k_step,
//                                   # gemm_tile_overhead_us, gemm_alignment as in a dtype table; nothing else
//   [device.bf16.op_efficiency]     # optional, per op: the time the figures above predict over the real
//                                   # time (default 1; above 1 when the data stays in cache)
//   layernorm_backward = { value = 0.5, source = "..." }
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
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/toml_reader.h"

namespace strata {

// The units the descriptions use: GB (1e9 bytes, of bandwidths) and GiB (2^30 bytes, of memories).
inline constexpr double kGB = 1e9;
inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// One output tile a GEMM library computes per compute unit, and the fraction
// of the unit's peak it sustains once its pipeline is full.
struct GemmTile {
  int64_t rows = 1;
  int64_t columns = 1;
  double efficiency = 1;
};

// How a matrix engine runs a GEMM (planner/device_time.h prices it): the
// output is cut into tiles, the tiles run in waves of `compute_units`, each
// tile walks k in steps; the library picks the tile that finishes first.
struct GemmEngine {
  int compute_units = 1;
  std::vector<GemmTile> tiles;
  int64_t k_step = 1;
  double tile_overhead_s = 0;  // per tile in a wave: prologue, epilogue, the small-k regime
  // (elements, efficiency) from the widest alignment down to 1: a GEMM runs at
  // the efficiency of the first alignment that divides its n and k, the
  // leading dimensions of row-major operands (m, the rows, is free: measured
  // on an H200, an odd m costs nothing, an odd n or k 5 to 9 times).
  std::vector<std::pair<int64_t, double>> alignment{{1, 1.0}};
  double alignment_efficiency(int64_t n, int64_t k) const;
};

// Fused (flash-style) attention: tiles of `block_rows` query rows per (batch
// row, head) run in waves; head dims are padded to the kernel's step.
struct AttentionEngine {
  double forward_efficiency = 1;   // fraction of matrix peak, long sequences
  double backward_efficiency = 1;
  int64_t block_rows = 1;
  int64_t head_dim_step = 1;
  double tile_overhead_s = 0;
  // The head dims the kernels are built for, ascending (FlashAttention 1.x: 32, 64 and 128); empty: every
  // multiple of head_dim_step.
  std::vector<int64_t> head_dims;
  // The head dim of the kernel a head dim runs on (the padding it pays), or nothing when no kernel takes it.
  std::optional<int64_t> kernel_head_dim(int64_t head_dim) const;
};

struct DTypePerformance {
  double matrix_flops = 0;  // FLOP/s; 0: the vector units only (no GEMMs in this dtype)
  // The rate the matrix engine holds at the device's power limit under back-to-back GEMMs; 0: none
  // given (the tiles' rates stand). Large GEMMs meet it: an H200 drops to its 700 W clock.
  double sustained_matrix_flops = 0;
  double vector_flops = 0;  // FLOP/s
  GemmEngine gemm;
  AttentionEngine attention;
  // Other attention libraries' engines on this device, by name: a run calling one is priced on it instead.
  std::map<std::string, AttentionEngine> attention_libraries;
  std::map<std::string, double> op_efficiency;  // predicted time / real time, by op name; absent: 1
};

struct DeviceSpec {
  std::string name;
  double memory_bytes = 0;
  double reserved_bytes = 0;
  double memory_bandwidth_Bps = 0;
  double memory_efficiency = 1;
  double op_overhead_s = 0;
  // The fraction by which compute slows while a collective runs beside it
  // (communication kernels take compute units and memory bandwidth).
  double comm_compute_slowdown = 0;
  std::map<DType, DTypePerformance> dtypes;
  // The float8 matrix engine ([device.fp8]: GEMM figures only) that float8 linears run on
  // (planner/fp8_linears.h); absent on a device without float8 matrix units (an A100).
  std::optional<DTypePerformance> fp8;

  double usable_memory_bytes() const { return memory_bytes - reserved_bytes; }
  // Whether plans can compute in `dtype` (its matrix engine has figures for it).
  bool computes(DType dtype) const { return dtypes.count(dtype) != 0 && dtypes.at(dtype).matrix_flops > 0; }
  const DTypePerformance& performance(DType dtype) const;  // throws naming the device and dtype
  const DTypePerformance& fp8_performance() const;         // throws naming the device when it has no fp8 engine
  // Prices fused attention in `dtype` on the named library's engine (attention_libraries) from now on;
  // throws naming the libraries the device describes when it lacks this one.
  void use_attention_library(DType dtype, const std::string& library);
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
  std::string collectives = "strata";  // strata, nccl or hccl
  DeviceSpec device;
  LinkSpec intra_node;  // per device
  LinkSpec nic;         // per network port
  int nics_per_node = 0;
  // fp32 bytes one device combines per second in a reduction (one operand
  // stream); 0: a third of its memory bandwidth (read two, write one).
  double reduce_Bps = 0;
  // Every figure's source by its full dotted key ("device.bf16.gemm_tiles" -> "fitted by ..."): what
  // planner/uncertainty.h reads to tell measured figures from assumed ones.
  std::map<std::string, std::string> figure_sources;

  int devices() const { return nodes * devices_per_node; }
  double node_network_Bps() const { return nic.bandwidth_Bps * nics_per_node; }
  // Throws naming `source` and the key of the first nonsense figure.
  void validate() const;
};

ClusterSpec parse_cluster(const std::string& toml_text, const std::string& source);
ClusterSpec read_cluster(const TomlReader& fields);  // an already parsed file
ClusterSpec load_cluster(const std::filesystem::path& path);

}  // namespace strata
