#pragma once
// The alpha-beta-gamma cost model of every algorithm on a two-level topology
// (ranks within a node, nodes on a network). Pure arithmetic: no MPI, nothing
// runs, so the parallelism planner can price collectives on clusters it does
// not have. The communicator uses the same functions to pick algorithms.
//
// Per step of an algorithm every rank exchanges with one partner. A step that
// stays inside nodes costs intra.latency + bytes / intra.bandwidth; a step with
// flows between nodes costs inter.latency + bytes * F / inter.bandwidth, where F
// is the largest number of this step's flows that leave (or enter) one node,
// since they share its network link. Reducing steps add bytes / reduce_Bps.
// On one node the sums reduce to the textbook costs of Thakur, Rabenseifner and
// Gropp (2005).
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "comm/collective.h"
#include "core/dtype.h"

namespace strata::comm {

struct LinkLevel {
  double latency_s = 0.0;      // alpha: cost of one message, seconds
  double bandwidth_Bps = 0.0;  // 1/beta: bytes per second of one flow
};

// Bytes per second one rank moves a block at, by block size, measured with
// every rank of the node doing the same at once: (block bytes, bytes per
// second), ascending in bytes. Between points the rate is interpolated in
// log(bytes), beyond them the end points hold; empty: unknown.
struct RateCurve {
  std::vector<std::pair<double, double>> points;

  bool empty() const { return points.empty(); }
  double at(double bytes) const;
};

// A group as the model sees it. Ranks sit node-major (rank / ranks_per_node)
// unless node_of_rank lists each rank's node (real groups may be scattered).
struct TopologyDesc {
  int nodes = 1;
  int ranks_per_node = 1;
  LinkLevel intra;  // rank to rank inside a node, with every rank of the node busy at once
  LinkLevel inter;  // one node's network link, shared by its flows that cross it at once
  double reduce_Bps = 0.0;  // fp32 bytes one rank combines per second (one operand stream)
  std::vector<int> node_of_rank;
  // Ranks of a node can map each other's memory (CPU processes on one host):
  // allows the shared-memory all-reduce on one-node groups ...
  bool shared_memory = false;
  // ... and can read each other's memory directly (Linux cross-memory attach):
  // allows the direct-read all-reduce there.
  bool cross_memory = false;
  // The cores a node's ranks of the group run on at once; 0: one per rank.
  // Below the rank count (more processes than cores) their copies share the
  // cores, so an uneven exchange costs its total work spread over them, not
  // only its busiest rank's.
  double cores_per_node = 0.0;
  // The node's memory bandwidth: bytes per second all its cores copy together
  // (memcpy, out of cache); 0: unknown, copies run at reduce_Bps at any size.
  // The cores copying at once share it, ...
  double memory_Bps = 0.0;
  // ... once the bytes an exchange touches on the node outgrow its cache as
  // copies see it (bytes; the probe fits it, effective_cache_bytes; 0:
  // unknown, treated as unbounded).
  double cache_bytes = 0.0;
  // One-host exchanges: how fast a rank copies a block with memcpy (through
  // the exchange area) and reads one from a peer's memory (cross-memory
  // attach), by block size; they decide whether the all-to-all stages its
  // blocks (two copies) or has them read (one read). Unknown (empty): copies
  // at reduce_Bps, reads at intra.bandwidth.
  RateCurve copy;
  RateCurve cross_read;
  // How fast a rank copies a block between buffers of its own (memcpy, every
  // rank of the node copying at once, a core each), by block size: the
  // one-host all-to-all's own block, input to output, which crosses no core
  // (a copy through the area moves lines the peer's core holds: 2-3x slower
  // in a core's cache on the Xeon VM). Unknown (empty): at the copy rate.
  RateCurve local_copy;
  // One message between two ranks of a node through the MPI library, one way (half a ping-pong), by size:
  // (bytes, seconds), ascending, linear between the points. The library sends small messages eagerly through
  // its own buffers and larger ones after a handshake (Open MPI's shared-memory transport: a 4 KiB payload
  // with its header is already past the 4 KiB eager limit, and then costs a round trip and a cross-memory
  // read more), so a message of these sizes is not latency + bytes / bandwidth. Past the last point the
  // bandwidth adds the rest. The times are measured with one pair talking and the bandwidth with every rank
  // exchanging at once (with more ranks than cores, several times slower), so a step's message takes the
  // larger of the two. Empty: unknown, latency + bytes / intra.bandwidth.
  std::vector<std::pair<double, double>> intra_message;

  int ranks() const;
  double intra_message_s(double bytes) const;
  double copy_Bps(double block_bytes) const;
  double local_copy_Bps(double block_bytes) const;
  double cross_read_Bps(double block_bytes) const;
  int node_of(int rank) const;
  // Whether `ranks` ranks of one node each run on a core of their own (cores_per_node unknown counts as yes).
  bool has_core_per_rank(size_t ranks) const;
  bool uniform() const;  // every node holds the same number of ranks
  // Throws strata::Error naming `what` when a count, latency or bandwidth is nonsense.
  void validate(const std::string& what) const;
};

// Measured time = (latency_scale * (alpha terms) + bandwidth_scale * (beta
// and gamma terms)) * size_factor(bytes); the benchmark fits all of them per
// algorithm. The size factors (bytes, factor), ascending in bytes, correct
// what the straight-line model cannot follow, such as caches (NCCL keeps a
// similar per-size table for its trees); between points the factor is
// interpolated in log(bytes), beyond them the end points hold.
struct Calibration {
  double latency_scale = 1.0;
  double bandwidth_scale = 1.0;
  std::vector<std::pair<double, double>> size_factors;

  double size_factor(double bytes) const;
  bool is_identity() const { return latency_scale == 1.0 && bandwidth_scale == 1.0 && size_factors.empty(); }
};

inline constexpr size_t kDefaultChunkBytes = 256 * 1024;
// The shared-memory all-reduce's slots: chunks a rank may copy ahead, and
// their size. It only takes messages that fit (as fp32) in them, 64 KiB: then
// every rank copies all of its contribution at once and waits for its peers
// only once. Bigger messages would move in lockstep with the peers, which
// suffers badly whenever a rank is descheduled (measured from 128 KiB up on a
// shared 2-core host); the point-to-point and direct algorithms take those.
inline constexpr size_t kSharedMemorySlots = 4;
inline constexpr size_t kSharedMemorySlotBytes = 16 * 1024;
// The one-host all-to-all may stage a rank's blocks in its exchange area: a
// copy in and a copy out instead of a cross-memory read per block, and no
// meeting at the end (the sender's input is free at once). Whether that pays
// depends on the host: on an AMD EPYC VM process_vm_readv moved 4.7 GB/s where
// memcpy moved 13.5 (two copies win), on a Xeon VM 10.5 against 12.5 GB/s at
// 8 MiB (one read wins) but 13 against 31 GB/s at 256 KiB (two copies win), so
// the cost model decides per call from the probed rates
// (stages_all_to_all_blocks). The area holds up to CommConfig::exchange_staging_bytes (default
// kDefaultStagingBytes) per rank; its first kPrefaultedStagingBytes are
// touched when the group is made, the rest the first time an exchange needs
// them (memory is only taken as far as exchanges have used it).
inline constexpr size_t kDefaultStagingBytes = size_t{64} << 20;
inline constexpr size_t kPrefaultedStagingBytes = size_t{1} << 20;

struct ModelOptions {
  std::array<Calibration, kAlgorithmSlots> calibration{};
  size_t chunk_bytes = kDefaultChunkBytes;  // pipelined ring broadcast sends chunks of this size
  size_t staging_bytes = kDefaultStagingBytes;  // a rank's exchange area: the one-host algorithms stage up to this much
  // A one-host all-to-all rank whose outgoing blocks exceed this stages none of
  // them (CommConfig::all_to_all_staging_bytes); below it the cost model
  // decides (stages_all_to_all_blocks). Unlimited by default.
  size_t all_to_all_staging_limit = std::numeric_limits<size_t>::max();
  // How reducing phases work. Strata's engine (false) sends fp32 partial sums
  // and combines them in a pass of its own; device libraries such as NCCL and
  // HCCL (true) send the data's dtype and combine as they copy, so a reduction
  // costs its transfers alone.
  bool fused_reduction = false;

  const Calibration& of(Algorithm algorithm) const {
    return calibration[static_cast<size_t>(algorithm)];
  }
  Calibration& of(Algorithm algorithm) { return calibration[static_cast<size_t>(algorithm)]; }
};

// One call: `bytes` is nccl-tests' size (the whole buffer for all_reduce and
// broadcast, the whole input of reduce_scatter, the whole output of
// all_gather, one rank's whole send buffer for all_to_all; all_to_all_v is
// priced as the all_to_all of that size, predict_all_to_all_v prices uneven counts). Reducing phases move fp32 partial sums whatever the dtype,
// unless ModelOptions::fused_reduction.
struct CallShape {
  Collective op = Collective::AllReduce;
  double bytes = 0.0;
  DType dtype = DType::F32;
};

struct Cost {
  double latency_s = 0.0;   // alpha terms
  double transfer_s = 0.0;  // beta and gamma terms
  double total() const { return latency_s + transfer_s; }
};

// Whether the model prices `algorithm` (Mpi is the library's own business).
bool modeled(Algorithm algorithm);

// Whether `algorithm` can run `shape` on `topology`; when not, `why` says so.
bool applicable(Algorithm algorithm, const CallShape& shape, const TopologyDesc& topology,
                std::string* why = nullptr);

// Calibrated cost. Throws strata::Error for Auto, Mpi or an inapplicable algorithm.
Cost predict(const CallShape& shape, Algorithm algorithm, const TopologyDesc& topology,
             const ModelOptions& options = {});
inline double predict_seconds(const CallShape& shape, Algorithm algorithm, const TopologyDesc& topology,
                              const ModelOptions& options = {}) {
  return predict(shape, algorithm, topology, options).total();
}

// all_to_all_v with bytes[i][j] sent from rank i to rank j, by `algorithm`
// (pairwise or hierarchical), calibrated at the busiest rank's buffer size.
// Throws strata::Error for an algorithm it does not price or that cannot run there.
Cost predict_all_to_all_v(const std::vector<std::vector<double>>& bytes, const TopologyDesc& topology,
                          const ModelOptions& options = {}, Algorithm algorithm = Algorithm::Pairwise);

// One measurement of the node's cache: every rank of the node copied at once, touching `touched`
// bytes on the node together (sources and targets), at `Bps` bytes per second for the node.
struct CacheProbePoint {
  double touched = 0.0;
  double Bps = 0.0;
};

// The node's cache as the one-host copies see it: the size under which cached_fraction's mix of
// the in-cache rate (the smallest point's) and memory_Bps reproduces each point's measured rate,
// the largest over the points, at most `limit` (the caches the machine reports; 0: none). A cache
// that holds every point's bytes is `limit`; one that speeds up no copy is the smallest point's
// bytes (the model then prices copies alike either side of it). What the machine reports can be
// far from this: on the Xeon VM here, 300 MiB of L3 copy no faster than memory past 4 MiB.
double effective_cache_bytes(const std::vector<CacheProbePoint>& points, double memory_Bps, double limit);

// Whether a one-host all-to-all sender (cross-memory attach) stages its blocks
// in its exchange area; `row[j]`: the bytes it sends rank j (its own entry is
// not sent). No, when its outgoing bytes exceed
// options.all_to_all_staging_limit. Otherwise the blocks that fit the area
// (in rank order, as the runtime stages them) are staged when two copies
// (in by the sender, out by the receiver, each at topology.copy_Bps of the
// block) cost no more than one read (cross_read_Bps of the block), both as
// the pairwise cost prices them (cache, memory bandwidth and cores shared),
// as though every rank sent such a row. Where the ranks outnumber the
// host's cores, reading also costs the sender the meeting at the end that
// staging every block spares it (its readers must get a core first); with a
// core per rank that wait overlaps the readers and is not weighed. The
// meeting is priced from the probe's latency, which swung from 1.8 to 17.8 us
// between two probes of 4 ranks on the loaded 2-core host: at 17.8 us
// staging wins up to about 256 KiB per rank instead of 64 KiB. `copy_pace`
// scales the copy rate: the runtime's measure of its copies now against the
// probe's (comm/copy_pace.h).
bool stages_all_to_all_blocks(const std::vector<double>& row, int sender, const TopologyDesc& topology,
                              const ModelOptions& options, double copy_pace = 1.0);

struct Choice {
  Algorithm algorithm = Algorithm::Ring;
  double predicted_s = 0.0;
  std::vector<std::pair<Algorithm, double>> candidates;  // every applicable modeled algorithm
};

// The cheapest applicable modeled algorithm; ties go to the earlier one in
// kConcreteAlgorithms (rhd before ring).
Choice choose_algorithm(const CallShape& shape, const TopologyDesc& topology, const ModelOptions& options = {});

// The hierarchical algorithm's pieces: the group of one node, the group of one
// rank per node (its link shared by the node's ranks_per_node columns running
// at once), and the all-reduce chosen for that column.
TopologyDesc node_topology(const TopologyDesc& topology);
TopologyDesc column_topology(const TopologyDesc& topology);
Algorithm hierarchical_inner_algorithm(const CallShape& shape, const TopologyDesc& topology,
                                       const ModelOptions& options);

}  // namespace strata::comm
