#include "comm/cost_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "comm/block_layout.h"
#include "core/error.h"

namespace strata::comm {

int TopologyDesc::ranks() const {
  if (!node_of_rank.empty()) return static_cast<int>(node_of_rank.size());
  return nodes * ranks_per_node;
}

int TopologyDesc::node_of(int rank) const {
  if (!node_of_rank.empty()) return node_of_rank[static_cast<size_t>(rank)];
  return rank / ranks_per_node;
}

namespace {

// Interpolated between (bytes, value) points, ascending, at the fraction `place(lower, upper, bytes)` of the
// way between the points either side; the end points hold beyond them.
template <typename Place>
double interpolated(const std::vector<std::pair<double, double>>& points, double bytes, const Place& place) {
  if (bytes <= points.front().first) return points.front().second;
  if (bytes >= points.back().first) return points.back().second;
  auto upper = std::lower_bound(points.begin(), points.end(), bytes,
                                [](const std::pair<double, double>& point, double b) { return point.first < b; });
  auto lower = upper - 1;
  return lower->second + place(lower->first, upper->first, bytes) * (upper->second - lower->second);
}

// In log(bytes).
double log_interpolated(const std::vector<std::pair<double, double>>& points, double bytes) {
  return interpolated(points, bytes, [](double lower, double upper, double b) {
    return std::log(b / lower) / std::log(upper / lower);
  });
}

}  // namespace

double RateCurve::at(double bytes) const { return log_interpolated(points, bytes); }

double TopologyDesc::intra_message_s(double bytes) const {
  const double straight = intra.latency_s + bytes / intra.bandwidth_Bps;
  if (intra_message.empty()) return straight;
  const auto& [last_bytes, last_seconds] = intra_message.back();
  const double measured =
      bytes >= last_bytes ? last_seconds + (bytes - last_bytes) / intra.bandwidth_Bps
                          : interpolated(intra_message, bytes, [](double lower, double upper, double b) {
                              return (b - lower) / (upper - lower);
                            });
  return std::max(measured, straight);
}

double TopologyDesc::copy_Bps(double block_bytes) const { return copy.empty() ? reduce_Bps : copy.at(block_bytes); }

double TopologyDesc::local_copy_Bps(double block_bytes) const {
  return local_copy.empty() ? copy_Bps(block_bytes) : local_copy.at(block_bytes);
}

double TopologyDesc::cross_read_Bps(double block_bytes) const {
  return cross_read.empty() ? intra.bandwidth_Bps : cross_read.at(block_bytes);
}

bool TopologyDesc::has_core_per_rank(size_t ranks) const {
  return cores_per_node <= 0.0 || cores_per_node >= static_cast<double>(ranks);
}

bool TopologyDesc::uniform() const {
  if (node_of_rank.empty()) return true;
  std::vector<int> per_node(static_cast<size_t>(nodes), 0);
  for (int node : node_of_rank) ++per_node[static_cast<size_t>(node)];
  return std::all_of(per_node.begin(), per_node.end(), [&](int n) { return n == per_node[0]; });
}

void TopologyDesc::validate(const std::string& what) const {
  if (nodes < 1) fail("{}: nodes must be at least 1, got {}", what, nodes);
  if (ranks_per_node < 1) fail("{}: ranks_per_node must be at least 1, got {}", what, ranks_per_node);
  auto check_link = [&](const LinkLevel& link, const char* level) {
    if (!(link.latency_s >= 0.0) || !std::isfinite(link.latency_s)) {
      fail("{}: {}.latency must be a finite value >= 0, got {}", what, level, link.latency_s);
    }
    if (!(link.bandwidth_Bps > 0.0) || !std::isfinite(link.bandwidth_Bps)) {
      fail("{}: {}.bandwidth must be a finite value > 0, got {}", what, level, link.bandwidth_Bps);
    }
  };
  check_link(intra, "intra");
  if (nodes > 1) check_link(inter, "inter");
  if (!(reduce_Bps > 0.0) || !std::isfinite(reduce_Bps)) {
    fail("{}: reduce bandwidth must be a finite value > 0, got {}", what, reduce_Bps);
  }
  for (int node : node_of_rank) {
    if (node < 0 || node >= nodes) fail("{}: rank placed on node {} of {}", what, node, nodes);
  }
  auto check_unknown_or_positive = [&](double value, const char* name) {
    if (!(value >= 0.0) || !std::isfinite(value)) fail("{}: {} must be a finite value >= 0, got {}", what, name, value);
  };
  check_unknown_or_positive(cores_per_node, "cores_per_node");
  check_unknown_or_positive(memory_Bps, "memory bandwidth");
  check_unknown_or_positive(cache_bytes, "cache size");
  // (bytes, value) points: bytes ascending, both finite and positive; `value` names the second ("rate", "time").
  auto check_curve = [&](const std::vector<std::pair<double, double>>& points, const char* name, const char* value) {
    for (size_t i = 0; i < points.size(); ++i) {
      const auto& [bytes, figure] = points[i];
      if (!(bytes > 0.0) || !std::isfinite(bytes) || !(figure > 0.0) || !std::isfinite(figure) ||
          (i > 0 && !(bytes > points[i - 1].first))) {
        fail("{}: {} {} point {} must have bytes > 0, ascending, and a finite {} > 0, got ({}, {})", what, name, value,
             i, value, bytes, figure);
      }
    }
  };
  check_curve(copy.points, "copy", "rate");
  check_curve(intra_message, "intra message", "time");
  check_curve(cross_read.points, "cross-memory read", "rate");
  check_curve(local_copy.points, "local copy", "rate");
}

namespace {

using Flows = std::vector<std::pair<int, int>>;

// Accumulates the cost of an algorithm's steps on one topology.
class Schedule {
 public:
  explicit Schedule(const TopologyDesc& topology)
      : topology_(topology), leaving_(static_cast<size_t>(topology.nodes)),
        entering_(static_cast<size_t>(topology.nodes)) {}

  // Every flow carries `bytes`; each receiver then combines `reduce_bytes`.
  void step(const Flows& flows, double bytes, double reduce_bytes, double times = 1.0) {
    if (flows.empty() || bytes <= 0.0 || times <= 0.0) return;
    std::fill(leaving_.begin(), leaving_.end(), 0);
    std::fill(entering_.begin(), entering_.end(), 0);
    bool inside_node = false;
    int sharing = 0;
    for (auto [from, to] : flows) {
      int a = topology_.node_of(from), b = topology_.node_of(to);
      if (a == b) {
        inside_node = true;
        continue;
      }
      sharing = std::max({sharing, ++leaving_[static_cast<size_t>(a)], ++entering_[static_cast<size_t>(b)]});
    }
    double latency = 0.0, transfer = 0.0;
    if (inside_node) {
      latency = topology_.intra.latency_s;
      transfer = topology_.intra_message_s(bytes) - latency;
    }
    if (sharing > 0) {
      double inter_transfer = bytes * sharing / topology_.inter.bandwidth_Bps;
      if (topology_.inter.latency_s + inter_transfer > latency + transfer) {
        latency = topology_.inter.latency_s;
        transfer = inter_transfer;
      }
    }
    if (reduce_bytes > 0.0) transfer += reduce_bytes / topology_.reduce_Bps;
    cost.latency_s += times * latency;
    cost.transfer_s += times * transfer;
  }

  Cost cost;

 private:
  const TopologyDesc& topology_;
  std::vector<int> leaving_, entering_;
};

constexpr double kWireFloat = 4.0;  // Strata's reducing phases carry fp32 partial sums

// Bytes per element a reducing phase sends, and per element it combines in a pass of its own.
struct Reducing {
  double wire;
  double combine;
};
Reducing reducing(const ModelOptions& options, double width) {
  return options.fused_reduction ? Reducing{width, 0.0} : Reducing{kWireFloat, kWireFloat};
}

Flows ring_flows(int ranks) {
  Flows flows;
  for (int r = 0; r < ranks; ++r) flows.emplace_back(r, (r + 1) % ranks);
  return flows;
}

Flows chain_flows(int ranks) {
  Flows flows;
  for (int r = 0; r + 1 < ranks; ++r) flows.emplace_back(r, r + 1);
  return flows;
}

Flows exchange_flows(const Fold& fold, int distance) {
  Flows flows;
  for (int v = 0; v < fold.pof2; ++v) flows.emplace_back(fold.real_rank(v), fold.real_rank(v ^ distance));
  return flows;
}

Flows fold_flows(const Fold& fold, bool inward) {
  Flows flows;
  for (int v = 0; v < fold.extra; ++v) {
    if (inward) {
      flows.emplace_back(2 * v, 2 * v + 1);
    } else {
      flows.emplace_back(2 * v + 1, 2 * v);
    }
  }
  return flows;
}

// Binomial tree rooted at rank 0: at `mask`, rank v + mask talks to v for v a multiple of 2*mask.
Flows binomial_flows(int ranks, int mask, bool toward_root) {
  Flows flows;
  for (int v = 0; v + mask < ranks; v += 2 * mask) {
    if (toward_root) {
      flows.emplace_back(v + mask, v);
    } else {
      flows.emplace_back(v, v + mask);
    }
  }
  return flows;
}

// Element ranges of the virtual ranks as real numbers, so the model is exact for any size.
std::vector<double> even_ranges(double count, int pof2) {
  std::vector<double> starts(static_cast<size_t>(pof2) + 1);
  for (int v = 0; v <= pof2; ++v) starts[static_cast<size_t>(v)] = count * v / pof2;
  return starts;
}

std::vector<double> block_ranges(const Fold& fold, double block) {
  std::vector<double> starts(static_cast<size_t>(fold.pof2) + 1);
  for (int v = 0; v < fold.pof2; ++v) starts[static_cast<size_t>(v)] = block * fold.first_block(v);
  starts[static_cast<size_t>(fold.pof2)] = block * fold.ranks;
  return starts;
}

double range(const std::vector<double>& starts, int lo, int hi) {
  return starts[static_cast<size_t>(hi)] - starts[static_cast<size_t>(lo)];
}

// Recursive halving: distance pof2/2 first; each rank sends the half it does not keep.
void halving_steps(Schedule& schedule, const Fold& fold, const std::vector<double>& starts, const Reducing& r) {
  for (int size = fold.pof2; size > 1; size /= 2) {
    int half = size / 2;
    double largest = 0.0;
    for (int lo = 0; lo < fold.pof2; lo += size) {
      largest = std::max({largest, range(starts, lo, lo + half), range(starts, lo + half, lo + size)});
    }
    schedule.step(exchange_flows(fold, half), largest * r.wire, largest * r.combine);
  }
}

// Recursive doubling of gathered ranges: distance 1 first.
void doubling_steps(Schedule& schedule, const Fold& fold, const std::vector<double>& starts, double width) {
  for (int mask = 1; mask < fold.pof2; mask *= 2) {
    double largest = 0.0;
    for (int lo = 0; lo < fold.pof2; lo += mask) largest = std::max(largest, range(starts, lo, lo + mask));
    schedule.step(exchange_flows(fold, mask), largest * width, 0.0);
  }
}

Cost raw_cost(const CallShape& shape, Algorithm algorithm, const TopologyDesc& topology,
              const ModelOptions& options);
// The bytes of one cross-memory read of the direct all-reduces, which read a
// peer's input a chunk at a time (options.chunk_bytes of fp32), at most `bytes`.
double chunk_read_bytes(const ModelOptions& options, double bytes) {
  return options.chunk_bytes > 0 ? std::min(bytes, static_cast<double>(options.chunk_bytes)) : bytes;
}

// Seconds per byte of one-host copies that run at `rate` bytes/s in cache,
// when `cached` of the bytes they touch stay in the node's cache: the rest
// runs no faster than this core's share of the memory bandwidth, which the
// node's `active` cores copying at once split between them.
double seconds_per_byte(double rate, double cached, double active, const TopologyDesc& topology) {
  const double from_memory =
      topology.memory_Bps > 0.0 ? std::max(1.0 / rate, active / topology.memory_Bps) : 1.0 / rate;
  return cached / rate + (1.0 - cached) * from_memory;
}

// The cores p ranks of one host run on at once.
double host_cores(const TopologyDesc& topology, size_t p) {
  return topology.cores_per_node > 0.0 ? std::min(topology.cores_per_node, static_cast<double>(p))
                                       : static_cast<double>(p);
}

// The fraction of `touched` bytes that stays in the node's cache.
double cached_fraction(const TopologyDesc& topology, double touched) {
  return topology.cache_bytes > 0.0 && touched > topology.cache_bytes ? topology.cache_bytes / touched : 1.0;
}

// One meeting of the one-host exchange: every rank's own work (publishing,
// polling), shared out over the cores like the copies.
double meeting_seconds(const TopologyDesc& topology, size_t p) {
  return topology.intra.latency_s * static_cast<double>(p) / host_cores(topology, p);
}

// Which blocks of the one-host pairwise all-to-all a sender stages in its
// exchange area (as the runtime does: in rank order while they fit, when
// stages_all_to_all_blocks says so); staged[i][j] for rank i's block to j.
std::vector<std::vector<char>> staged_blocks(const std::vector<std::vector<double>>& bytes, const TopologyDesc& topology,
                                             const ModelOptions& options) {
  const size_t p = bytes.size();
  std::vector<std::vector<char>> staged(p, std::vector<char>(p, 0));
  for (size_t rank = 0; rank < p; ++rank) {
    if (!stages_all_to_all_blocks(bytes[rank], static_cast<int>(rank), topology, options)) continue;
    double used = 0.0;
    for (size_t peer = 0; peer < p; ++peer) {
      if (peer == rank || used + bytes[rank][peer] > static_cast<double>(options.staging_bytes)) continue;
      used += bytes[rank][peer];
      staged[rank][peer] = 1;
    }
  }
  return staged;
}

// The one-host pairwise all-to-all with cross-memory attach: every rank copies
// its staged blocks in, meets the others once, then copies its p - 1 blocks
// out and its own block from input to output. Every call meets twice: a call
// whose blocks were read waits at its end until its readers are done, and one
// that staged them all leaves at once but waits at the start of the group's
// next exchange until its peers have taken them out of the area
// (take_segment_for_header), which calls back to back, as a benchmark's or a
// layer's forward and backward exchanges are, pay in full.
// Copies through the area run at the block's copy rate (topology.copy_Bps),
// the own block's at the local copy rate, reads of a peer's input at its
// cross-memory read rate, both while their bytes stay in cache;
// past the cache, at the rank's share of the node's memory bandwidth where
// that is slower. The busiest rank's copies set the pace, or, when the ranks
// outnumber their cores, all copies and meetings spread over the cores (each
// rank gets cores / p of one).
Cost direct_pairwise_cost(const std::vector<std::vector<double>>& bytes, const TopologyDesc& topology,
                          const ModelOptions& options) {
  const size_t p = bytes.size();
  const std::vector<std::vector<char>> staged = staged_blocks(bytes, topology, options);
  const double cores = host_cores(topology, p);
  // Bytes touched on the node: every input, output and staged block.
  double touched = 0.0;
  for (size_t rank = 0; rank < p; ++rank) {
    for (size_t peer = 0; peer < p; ++peer) {
      touched += (2.0 + (peer != rank && staged[rank][peer] ? 1.0 : 0.0)) * bytes[rank][peer];
    }
  }
  const double cached = cached_fraction(topology, touched);
  auto copy_s = [&](double block) { return seconds_per_byte(topology.copy_Bps(block), cached, cores, topology); };
  auto read_s = [&](double block) { return seconds_per_byte(topology.cross_read_Bps(block), cached, cores, topology); };
  double busiest = 0.0, total = 0.0;
  for (size_t rank = 0; rank < p; ++rank) {
    // Its own block, input to output, at the local rate of a copy that touches as much as the rank's input and
    // output (the curve's blocks b touch 2 b a rank): whether they still fit a core's cache decides it.
    const double input = std::accumulate(bytes[rank].begin(), bytes[rank].end(), 0.0);
    double seconds = bytes[rank][rank] * seconds_per_byte(topology.local_copy_Bps(input), cached, cores, topology);
    for (size_t peer = 0; peer < p; ++peer) {
      if (peer == rank) continue;
      const double out = bytes[rank][peer], in = bytes[peer][rank];
      if (staged[rank][peer]) seconds += out * copy_s(out);
      seconds += in * (staged[peer][rank] ? copy_s(in) : read_s(in));
    }
    busiest = std::max(busiest, seconds);
    total += seconds;
  }
  return {2.0 * meeting_seconds(topology, p), std::max(busiest, total / cores)};
}

// Pairwise all-to-all; bytes[i][j] goes from rank i to rank j. On one host
// with cross-memory attach, direct_pairwise_cost (`options`: the exchange area
// and the staging limit). Otherwise step k is every rank's message to
// rank + k, as long as its largest message.
Cost pairwise_cost(const std::vector<std::vector<double>>& bytes, const TopologyDesc& topology, bool direct,
                   const ModelOptions& options = {}) {
  const int p = topology.ranks();
  if (direct) return direct_pairwise_cost(bytes, topology, options);
  Schedule schedule(topology);
  for (int k = 1; k < p; ++k) {
    Flows flows;
    double largest = 0.0;
    for (int from = 0; from < p; ++from) {
      flows.emplace_back(from, (from + k) % p);
      largest = std::max(largest, bytes[static_cast<size_t>(from)][static_cast<size_t>((from + k) % p)]);
    }
    // An empty message still costs its latency.
    schedule.step(flows, std::max(largest, 1e-9), 0.0);
  }
  return schedule.cost;
}

std::vector<std::vector<double>> uniform_blocks(double block_bytes, int ranks) {
  return std::vector<std::vector<double>>(static_cast<size_t>(ranks), std::vector<double>(static_cast<size_t>(ranks), block_bytes));
}

bool reads_directly(const TopologyDesc& topology) { return topology.nodes == 1 && topology.cross_memory; }

// bytes: nccl-tests' size, one rank's whole buffer.
Cost all_to_all_cost(Collective op, double bytes, Algorithm algorithm, const TopologyDesc& topology,
                     const ModelOptions& options) {
  const int p = topology.ranks();
  if (algorithm == Algorithm::Pairwise) {
    return pairwise_cost(uniform_blocks(bytes / p, p), topology, reads_directly(topology), options);
  }
  // Hierarchical: an all-to-all inside the node, one along the column (the
  // node's link shared by all columns), and three copies of the buffer;
  // all_to_all_v first trades the blocks' sizes inside the node.
  TopologyDesc node = node_topology(topology);
  TopologyDesc column = column_topology(topology);
  Cost inside = pairwise_cost(uniform_blocks(bytes / node.ranks(), node.ranks()), node, false);
  Cost across = pairwise_cost(uniform_blocks(bytes / column.ranks(), column.ranks()), column, false);
  Cost sizes;
  if (op == Collective::AllToAllV) {
    sizes = pairwise_cost(uniform_blocks(static_cast<double>(topology.nodes * sizeof(uint64_t)), node.ranks()), node, false);
  }
  return {sizes.latency_s + inside.latency_s + across.latency_s,
          sizes.transfer_s + inside.transfer_s + across.transfer_s + 3.0 * bytes / topology.reduce_Bps};
}

// Hierarchical all_to_all_v: the sizes traded inside the node (one more exchange's latency), then each node's
// exchange inside it and each column's between nodes, every one priced on its own blocks and the slowest
// setting the pace, and three copies of the busiest rank's bytes (staging, column staging, output).
// `busiest`: the most bytes one rank sends or receives.
Cost hierarchical_all_to_all_v_cost(const std::vector<std::vector<double>>& bytes, const TopologyDesc& topology,
                                    double busiest) {
  const int p = topology.ranks();
  const TopologyDesc node = node_topology(topology), column = column_topology(topology);
  const size_t positions = static_cast<size_t>(node.ranks()), nodes = static_cast<size_t>(topology.nodes);
  std::vector<std::vector<size_t>> members(nodes);
  for (int rank = 0; rank < p; ++rank) members[static_cast<size_t>(topology.node_of(rank))].push_back(static_cast<size_t>(rank));
  auto sent = [&](size_t from_node, size_t from_position, size_t to_node, size_t to_position) {
    return bytes[members[from_node][from_position]][members[to_node][to_position]];
  };
  Cost inside, across;
  for (size_t n = 0; n < nodes; ++n) {
    std::vector<std::vector<double>> blocks(positions, std::vector<double>(positions, 0.0));
    for (size_t q = 0; q < positions; ++q) {
      for (size_t l = 0; l < positions; ++l) {
        for (size_t m = 0; m < nodes; ++m) blocks[q][l] += sent(n, q, m, l);
      }
    }
    Cost cost = pairwise_cost(blocks, node, false);
    if (cost.total() > inside.total()) inside = cost;
  }
  for (size_t l = 0; l < positions; ++l) {
    std::vector<std::vector<double>> blocks(nodes, std::vector<double>(nodes, 0.0));
    for (size_t n = 0; n < nodes; ++n) {
      for (size_t m = 0; m < nodes; ++m) {
        for (size_t q = 0; q < positions; ++q) blocks[n][m] += sent(n, q, m, l);
      }
    }
    Cost cost = pairwise_cost(blocks, column, false);
    if (cost.total() > across.total()) across = cost;
  }
  const Cost sizes = pairwise_cost(uniform_blocks(static_cast<double>(nodes * sizeof(uint64_t)), node.ranks()), node, false);
  return {sizes.latency_s + inside.latency_s + across.latency_s,
          sizes.transfer_s + inside.transfer_s + across.transfer_s + 3.0 * busiest / topology.reduce_Bps};
}

Cost all_reduce_cost(double count, double width, Algorithm algorithm, const TopologyDesc& topology,
                     const ModelOptions& options, const CallShape& shape) {
  int p = topology.ranks();
  Schedule schedule(topology);
  Fold fold(p);
  const Reducing r = reducing(options, width);
  switch (algorithm) {
    case Algorithm::Ring: {
      double block = count / p;
      Flows flows = ring_flows(p);
      schedule.step(flows, block * r.wire, block * r.combine, p - 1);
      schedule.step(flows, block * width, 0.0, p - 1);
      break;
    }
    case Algorithm::RecursiveDoubling:
      schedule.step(fold_flows(fold, true), count * r.wire, count * r.combine);
      for (int mask = 1; mask < fold.pof2; mask *= 2) {
        schedule.step(exchange_flows(fold, mask), count * r.wire, count * r.combine);
      }
      schedule.step(fold_flows(fold, false), count * width, 0.0);
      break;
    case Algorithm::RecursiveHalvingDoubling: {
      std::vector<double> starts = even_ranges(count, fold.pof2);
      schedule.step(fold_flows(fold, true), count * r.wire, count * r.combine);
      halving_steps(schedule, fold, starts, r);
      doubling_steps(schedule, fold, starts, width);
      schedule.step(fold_flows(fold, false), count * width, 0.0);
      break;
    }
    case Algorithm::BinomialTree:
      for (int mask = 1; mask < p; mask *= 2) {
        schedule.step(binomial_flows(p, mask, true), count * r.wire, count * r.combine);
      }
      for (int mask = 1; mask < p; mask *= 2) schedule.step(binomial_flows(p, mask, false), count * width, 0.0);
      break;
    case Algorithm::SharedMemory: {
      // Each rank copies its contribution into shared memory once (priced as
      // one combine) and sums the p copies (p - 1 combines), all fp32.
      Cost cost;
      cost.latency_s = 2.0 * topology.intra.latency_s;
      cost.transfer_s = count * kWireFloat * p / topology.reduce_Bps;  // a CPU engine's, always fp32
      return cost;
    }
    case Algorithm::DirectRead: {
      // Each rank reads the p - 1 other inputs (in their dtype) and sums them
      // with its own; ranks meet twice (enter, done reading). Where the input
      // fits the exchange area each rank copies it in first, and the reads are
      // copies from shared memory, at the rank's own memory speed (reduce_Bps);
      // otherwise cross-memory reads of a chunk at a time.
      const double bytes = count * width;
      const bool staged = bytes <= static_cast<double>(options.staging_bytes);
      const double read_Bps = staged ? topology.reduce_Bps : topology.cross_read_Bps(chunk_read_bytes(options, bytes));
      Cost cost;
      cost.latency_s = 2.0 * topology.intra.latency_s;
      cost.transfer_s = (staged ? bytes / topology.reduce_Bps : 0.0) +
                        (p - 1.0) * count * (width / read_Bps + kWireFloat / topology.reduce_Bps);  // likewise
      return cost;
    }
    case Algorithm::DirectSplit: {
      // Each rank reads its slice of the p - 1 other inputs and sums the p
      // slices, then reads the p - 1 other reduced slices (outputs, in the
      // dtype); ranks meet three times (enter, slices reduced, done reading).
      // Staged (the input and a slice fit the exchange area), a rank copies
      // both in, and the reads are copies from shared memory, as for direct;
      // otherwise cross-memory reads: the inputs' slices a chunk at a time,
      // the reduced slices whole.
      const double bytes = count * width * (1.0 + 1.0 / p);
      const bool staged = bytes <= static_cast<double>(options.staging_bytes);
      const double slice = count * width / p;
      const double per_element =
          staged ? 2.0 * width / topology.reduce_Bps
                 : width / topology.cross_read_Bps(chunk_read_bytes(options, slice)) + width / topology.cross_read_Bps(slice);
      Cost cost;
      cost.latency_s = 3.0 * topology.intra.latency_s;
      cost.transfer_s = (staged ? bytes / topology.reduce_Bps : 0.0) +
                        (p - 1.0) / p * count * (per_element + kWireFloat / topology.reduce_Bps);  // likewise
      return cost;
    }
    case Algorithm::Hierarchical: {
      TopologyDesc node = node_topology(topology);
      int local = node.ranks();
      double part = count / local;
      Flows flows = ring_flows(local);
      Schedule intra(node);
      intra.step(flows, part * r.wire, part * r.combine, local - 1);
      intra.step(flows, part * width, 0.0, local - 1);
      CallShape column_shape{Collective::AllReduce, part * width, shape.dtype};
      TopologyDesc column = column_topology(topology);
      Algorithm inner = hierarchical_inner_algorithm(shape, topology, options);
      Cost across = raw_cost(column_shape, inner, column, options);
      return {intra.cost.latency_s + across.latency_s, intra.cost.transfer_s + across.transfer_s};
    }
    default: STRATA_CHECK(false, "no all_reduce cost for {}", algorithm_name(algorithm));
  }
  return schedule.cost;
}

Cost raw_cost(const CallShape& shape, Algorithm algorithm, const TopologyDesc& topology,
              const ModelOptions& options) {
  int p = topology.ranks();
  double width = static_cast<double>(dtype_size(shape.dtype));
  double count = shape.bytes / width;
  if (p <= 1 || count <= 0.0) return {};
  if (shape.op == Collective::AllReduce) {
    return all_reduce_cost(count, width, algorithm, topology, options, shape);
  }
  if (shape.op == Collective::AllToAll || shape.op == Collective::AllToAllV) {
    return all_to_all_cost(shape.op, shape.bytes, algorithm, topology, options);
  }
  Schedule schedule(topology);
  Fold fold(p);
  double block = count / p;
  const Reducing r = reducing(options, width);
  switch (shape.op) {
    case Collective::ReduceScatter:
      if (algorithm == Algorithm::Ring) {
        schedule.step(ring_flows(p), block * r.wire, block * r.combine, p - 1);
      } else {
        schedule.step(fold_flows(fold, true), count * r.wire, count * r.combine);
        halving_steps(schedule, fold, block_ranges(fold, block), r);
        schedule.step(fold_flows(fold, false), block * r.wire, 0.0);
      }
      break;
    case Collective::AllGather:
      if (algorithm == Algorithm::Ring) {
        schedule.step(ring_flows(p), block * width, 0.0, p - 1);
      } else {
        schedule.step(fold_flows(fold, true), block * width, 0.0);
        doubling_steps(schedule, fold, block_ranges(fold, block), width);
        schedule.step(fold_flows(fold, false), count * width, 0.0);
      }
      break;
    case Collective::Broadcast:
      if (algorithm == Algorithm::Ring) {
        double chunks = std::max(1.0, std::ceil(shape.bytes / static_cast<double>(options.chunk_bytes)));
        schedule.step(chain_flows(p), shape.bytes / chunks, 0.0, p - 2 + chunks);
      } else {
        for (int mask = 1; mask < p; mask *= 2) schedule.step(binomial_flows(p, mask, false), shape.bytes, 0.0);
      }
      break;
    case Collective::AllReduce:
    case Collective::AllToAll:
    case Collective::AllToAllV: break;
  }
  return schedule.cost;
}

Cost calibrated(Cost raw, const Calibration& calibration, double bytes) {
  double factor = calibration.size_factor(bytes);
  return {raw.latency_s * calibration.latency_scale * factor, raw.transfer_s * calibration.bandwidth_scale * factor};
}

}  // namespace

double Calibration::size_factor(double bytes) const {
  return size_factors.empty() ? 1.0 : log_interpolated(size_factors, bytes);
}

bool modeled(Algorithm algorithm) { return algorithm != Algorithm::Auto && algorithm != Algorithm::Mpi; }

bool applicable(Algorithm algorithm, const CallShape& shape, const TopologyDesc& topology, std::string* why) {
  auto refuse = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  if (!implements(algorithm, shape.op)) {
    return refuse(fmt::format("{} does not implement {}", algorithm_name(algorithm), collective_name(shape.op)));
  }
  if (algorithm == Algorithm::SharedMemory || algorithm == Algorithm::DirectRead ||
      algorithm == Algorithm::DirectSplit) {
    std::string name(algorithm_name(algorithm));
    if (!topology.shared_memory) return refuse(name + " needs ranks that share memory (no shared segment)");
    if (algorithm != Algorithm::SharedMemory && !topology.cross_memory) {
      return refuse(name + " needs ranks that can read each other's memory (cross-memory attach)");
    }
    if (topology.nodes != 1) return refuse(name + " needs all ranks on one node");
    double capacity = static_cast<double>(kSharedMemorySlots * kSharedMemorySlotBytes);
    double fp32_bytes = shape.bytes / static_cast<double>(dtype_size(shape.dtype)) * kWireFloat;
    if (algorithm == Algorithm::SharedMemory && fp32_bytes > capacity) {
      return refuse(fmt::format("shm takes messages up to {} bytes of fp32 (its slots)", capacity));
    }
  }
  if (algorithm == Algorithm::Hierarchical) {
    if (topology.nodes < 2) return refuse("hierarchical needs ranks on at least 2 nodes");
    if (!topology.uniform()) return refuse("hierarchical needs the same number of ranks on every node");
    if (topology.ranks() / topology.nodes < 2) return refuse("hierarchical needs at least 2 ranks per node");
  }
  return true;
}

TopologyDesc node_topology(const TopologyDesc& topology) {
  TopologyDesc node = topology;
  node.nodes = 1;
  node.ranks_per_node = topology.ranks() / topology.nodes;
  node.node_of_rank.clear();
  return node;
}

TopologyDesc column_topology(const TopologyDesc& topology) {
  TopologyDesc column = topology;
  int local = topology.ranks() / topology.nodes;
  column.ranks_per_node = 1;
  column.node_of_rank.clear();
  column.inter.bandwidth_Bps = topology.inter.bandwidth_Bps / local;
  return column;
}

Algorithm hierarchical_inner_algorithm(const CallShape& shape, const TopologyDesc& topology,
                                       const ModelOptions& options) {
  int local = topology.ranks() / topology.nodes;
  CallShape column_shape{Collective::AllReduce, shape.bytes / local, shape.dtype};
  TopologyDesc column = column_topology(topology);
  Algorithm best = Algorithm::Ring;
  double best_s = 0.0;
  bool first = true;
  for (Algorithm candidate : {Algorithm::Ring, Algorithm::RecursiveHalvingDoubling,
                              Algorithm::RecursiveDoubling, Algorithm::BinomialTree}) {
    double seconds =
        calibrated(raw_cost(column_shape, candidate, column, options), options.of(candidate), column_shape.bytes).total();
    if (first || seconds < best_s) {
      best = candidate;
      best_s = seconds;
      first = false;
    }
  }
  return best;
}

Cost predict(const CallShape& shape, Algorithm algorithm, const TopologyDesc& topology,
             const ModelOptions& options) {
  if (!modeled(algorithm)) fail("the cost model does not price algorithm '{}'", algorithm_name(algorithm));
  std::string why;
  if (!applicable(algorithm, shape, topology, &why)) {
    fail("cannot price {}: {}", collective_name(shape.op), why);
  }
  return calibrated(raw_cost(shape, algorithm, topology, options), options.of(algorithm), shape.bytes);
}

Cost predict_all_to_all_v(const std::vector<std::vector<double>>& bytes, const TopologyDesc& topology,
                          const ModelOptions& options, Algorithm algorithm) {
  const int p = topology.ranks();
  if (bytes.size() != static_cast<size_t>(p)) fail("all_to_all_v cost: {} rows of counts for {} ranks", bytes.size(), p);
  if (p <= 1) return {};
  std::string why;
  if (!modeled(algorithm) || !applicable(algorithm, {Collective::AllToAllV, 1.0, DType::F32}, topology, &why)) {
    fail("all_to_all_v cost: {} is not priced here{}", algorithm_name(algorithm), why.empty() ? "" : ": " + why);
  }
  double busiest = 0.0;
  for (int rank = 0; rank < p; ++rank) {
    double sent = 0.0, received = 0.0;
    for (int peer = 0; peer < p; ++peer) {
      sent += bytes[static_cast<size_t>(rank)][static_cast<size_t>(peer)];
      received += bytes[static_cast<size_t>(peer)][static_cast<size_t>(rank)];
    }
    busiest = std::max({busiest, sent, received});
  }
  Cost raw = algorithm == Algorithm::Hierarchical ? hierarchical_all_to_all_v_cost(bytes, topology, busiest)
                                                  : pairwise_cost(bytes, topology, reads_directly(topology), options);
  return calibrated(raw, options.of(algorithm), busiest);
}

double effective_cache_bytes(const std::vector<CacheProbePoint>& points, double memory_Bps, double limit) {
  STRATA_CHECK(!points.empty() && memory_Bps > 0.0, "the cache fit needs copy rates and a memory rate");
  auto by_size = points;
  std::sort(by_size.begin(), by_size.end(),
            [](const CacheProbePoint& a, const CacheProbePoint& b) { return a.touched < b.touched; });
  const double cached_Bps = by_size.front().Bps;
  const auto capped = [&](double bytes) { return limit > 0.0 ? std::min(bytes, limit) : bytes; };
  if (cached_Bps <= memory_Bps) return capped(by_size.front().touched);
  // A point at rate r touching T bytes: 1/r = c/cached + (1 - c)/memory with c = cache / T.
  double cache = 0.0;
  for (const CacheProbePoint& point : by_size) {
    const double share = (1.0 / memory_Bps - 1.0 / point.Bps) / (1.0 / memory_Bps - 1.0 / cached_Bps);
    if (share >= 1.0) {
      cache = std::max(cache, point.touched);
      continue;
    }
    cache = std::max(cache, std::max(share, 0.0) * point.touched);
  }
  // Every point ran as fast as in cache: nothing measured bounds it below what the machine reports.
  if (cache >= by_size.back().touched && limit > 0.0) return limit;
  return capped(cache);
}

bool stages_all_to_all_blocks(const std::vector<double>& row, int sender, const TopologyDesc& topology,
                              const ModelOptions& options, double copy_pace) {
  const size_t p = row.size(), me = static_cast<size_t>(sender);
  double outgoing = 0.0;
  for (size_t peer = 0; peer < p; ++peer) outgoing += peer == me ? 0.0 : row[peer];
  if (outgoing > static_cast<double>(options.all_to_all_staging_limit)) return false;
  const double cores = host_cores(topology, p);
  // As though every rank sent this row: inputs and outputs touched either way, the staged blocks once more.
  const double sent = outgoing + row[me];
  const double cached_staged = cached_fraction(topology, static_cast<double>(p) * (2.0 * sent + outgoing));
  const double cached_read = cached_fraction(topology, static_cast<double>(p) * 2.0 * sent);
  double staged_s = 0.0, read_s = 0.0, used = 0.0;
  bool all_fit = true;
  for (size_t peer = 0; peer < p; ++peer) {
    if (peer == me) continue;
    const double block = row[peer];
    if (used + block > static_cast<double>(options.staging_bytes)) {  // read either way
      all_fit = all_fit && block == 0.0;
      continue;
    }
    used += block;
    staged_s += 2.0 * block * seconds_per_byte(copy_pace * topology.copy_Bps(block), cached_staged, cores, topology);
    read_s += block * seconds_per_byte(topology.cross_read_Bps(block), cached_read, cores, topology);
  }
  // A sender whose blocks are read waits at the end until its readers are
  // done; one that stages them all leaves at once. With a core per rank the
  // readers run beside it and that wait is short; with more ranks than cores
  // they must first get a core, and the wait is a meeting. Measured on the
  // Xeon VM (comm-bench, fresh and reused inputs, 3 runs each): 4 ranks on 2
  // cores ran 16-64 KiB per rank staged at 1.2-1.8x MPI against 0.85-1.23x
  // read; 2 ranks read as fast or faster from 16 KiB up.
  if (all_fit && !topology.has_core_per_rank(p)) read_s += meeting_seconds(topology, p);
  return staged_s <= read_s;
}

Choice choose_algorithm(const CallShape& shape, const TopologyDesc& topology, const ModelOptions& options) {
  Choice choice;
  bool first = true;
  for (Algorithm candidate : kConcreteAlgorithms) {
    if (!modeled(candidate) || !applicable(candidate, shape, topology)) continue;
    double seconds = predict(shape, candidate, topology, options).total();
    choice.candidates.emplace_back(candidate, seconds);
    if (first || seconds < choice.predicted_s) {
      choice.algorithm = candidate;
      choice.predicted_s = seconds;
      first = false;
    }
  }
  return choice;
}

}  // namespace strata::comm
