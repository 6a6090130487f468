#pragma once
// Prices the collectives and point-to-point transfers of a plan on a cluster
// through the communication layer's cost model (comm/cost_model.h), choosing
// the cheapest algorithm per call as the communicator would. A group is
// described by its size and the distance between consecutive members in the
// device order (devices fill a node before the next); every device of a node
// runs the same phase at once, so a group gets the share of the node's network
// that its members on that node own. Results are memoised: a search asks for
// the same calls many times.
#include <cstddef>
#include <tuple>
#include <unordered_map>

#include "comm/cost_model.h"
#include "ops/schema.h"
#include "planner/hardware.h"

namespace strata {

class CommPricer {
 public:
  explicit CommPricer(const ClusterSpec& cluster);

  // Seconds for one collective of nccl-tests `bytes` (comm::CallShape) over the
  // `size` devices 0, stride, 2*stride, ...
  double collective(comm::Collective op, double bytes, int size, int stride, DType dtype = DType::F32);
  // The same for an op's call (OpSchema::comm) of a collective pattern (point-to-point is priced apart).
  double collective(CommPattern pattern, double bytes, int size, int stride, DType dtype);
  // Seconds for one message of `bytes` to the device `distance` places ahead.
  double point_to_point(double bytes, int distance);

  // The group as the cost model sees it (exposed for reports and tests).
  comm::TopologyDesc group_topology(int size, int stride) const;

 private:
  using CallKey = std::tuple<int, double, int, int, int>;  // op, bytes, size, stride, dtype
  struct CallKeyHash {
    size_t operator()(const CallKey& key) const;
  };
  const ClusterSpec& cluster_;
  // A search asks millions of times for about a thousand distinct calls: hashed, not ordered.
  std::unordered_map<CallKey, double, CallKeyHash> cache_;
};

}  // namespace strata
