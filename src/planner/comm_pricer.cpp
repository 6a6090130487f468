#include "planner/comm_pricer.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "core/error.h"

namespace strata {

CommPricer::CommPricer(const ClusterSpec& cluster) : cluster_(cluster) {}

size_t CommPricer::CallKeyHash::operator()(const CallKey& key) const {
  const auto& [op, bytes, size, stride, dtype] = key;
  size_t hash = std::hash<double>{}(bytes);
  for (int field : {op, size, stride, dtype}) hash = hash * 1000003 ^ std::hash<int>{}(field);
  return hash;
}

double CommPricer::collective(CommPattern pattern, double bytes, int size, int stride, DType dtype) {
  switch (pattern) {
    case CommPattern::AllReduce: return collective(comm::Collective::AllReduce, bytes, size, stride, dtype);
    case CommPattern::AllGather: return collective(comm::Collective::AllGather, bytes, size, stride, dtype);
    case CommPattern::ReduceScatter: return collective(comm::Collective::ReduceScatter, bytes, size, stride, dtype);
    case CommPattern::AllToAll: return collective(comm::Collective::AllToAll, bytes, size, stride, dtype);
    case CommPattern::PointToPoint: break;
  }
  fail("a point-to-point transfer priced as a collective");
}

comm::TopologyDesc CommPricer::group_topology(int size, int stride) const {
  const int per_node = cluster_.devices_per_node;
  std::vector<int> node_of_member(static_cast<size_t>(size));
  std::vector<int> members_on_node;
  int nodes = 0, last_node = -1;
  for (int i = 0; i < size; ++i) {
    int node = static_cast<int>(static_cast<int64_t>(i) * stride / per_node);
    if (node != last_node) {
      ++nodes;
      members_on_node.push_back(0);
      last_node = node;
    }
    node_of_member[static_cast<size_t>(i)] = nodes - 1;
    ++members_on_node.back();
  }
  comm::TopologyDesc topology;
  topology.nodes = nodes;
  int most = *std::max_element(members_on_node.begin(), members_on_node.end());
  bool uniform = std::all_of(members_on_node.begin(), members_on_node.end(), [&](int n) { return n == most; });
  topology.ranks_per_node = most;
  if (!uniform) topology.node_of_rank = node_of_member;
  topology.intra = {cluster_.intra_node.latency_s, cluster_.intra_node.bandwidth_Bps};
  // One device per node: no step stays inside a node, but the model wants a valid link.
  if (cluster_.devices_per_node == 1) topology.intra = {cluster_.nic.latency_s, cluster_.nic.bandwidth_Bps};
  if (nodes > 1) {
    double share = static_cast<double>(most) / per_node;
    topology.inter = {cluster_.nic.latency_s, cluster_.node_network_Bps() * share};
  }
  // Combining one operand stream reads it and the local partial and writes the sum.
  topology.reduce_Bps = cluster_.reduce_Bps > 0
                            ? cluster_.reduce_Bps
                            : cluster_.device.memory_bandwidth_Bps * cluster_.device.memory_efficiency / 3.0;
  if (nodes == 1 && size > 1 && !(topology.intra.bandwidth_Bps > 0)) {
    fail("{}: a group of {} devices inside a node needs intra_node figures", cluster_.source, size);
  }
  return topology;
}

double CommPricer::collective(comm::Collective op, double bytes, int size, int stride, DType dtype) {
  if (size <= 1 || bytes <= 0) return 0.0;
  auto key = std::make_tuple(static_cast<int>(op), bytes, size, stride, static_cast<int>(dtype));
  auto found = cache_.find(key);
  if (found != cache_.end()) return found->second;
  comm::CallShape shape{op, bytes, dtype};
  comm::ModelOptions options;
  options.fused_reduction = cluster_.collectives != "strata";
  double seconds = comm::choose_algorithm(shape, group_topology(size, stride), options).predicted_s;
  cache_.emplace(key, seconds);
  return seconds;
}

// A two-member broadcast is exactly one message from the root to its peer.
double CommPricer::point_to_point(double bytes, int distance) {
  return collective(comm::Collective::Broadcast, bytes, 2, distance, DType::F32);
}

}  // namespace strata
