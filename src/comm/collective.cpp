#include "comm/collective.h"

#include <string>

#include "core/error.h"

namespace strata::comm {

std::string_view collective_name(Collective op) {
  switch (op) {
    case Collective::AllReduce: return "all_reduce";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllGather: return "all_gather";
    case Collective::Broadcast: return "broadcast";
    case Collective::AllToAll: return "all_to_all";
    case Collective::AllToAllV: return "all_to_all_v";
  }
  return "?";
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

std::string_view algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::Auto: return "auto";
    case Algorithm::Ring: return "ring";
    case Algorithm::RecursiveHalvingDoubling: return "rhd";
    case Algorithm::RecursiveDoubling: return "recursive_doubling";
    case Algorithm::BinomialTree: return "binomial";
    case Algorithm::Hierarchical: return "hierarchical";
    case Algorithm::SharedMemory: return "shm";
    case Algorithm::DirectRead: return "direct";
    case Algorithm::DirectSplit: return "direct_split";
    case Algorithm::Pairwise: return "pairwise";
    case Algorithm::Mpi: return "mpi";
  }
  return "?";
}

Collective parse_collective(std::string_view name, std::string_view what) {
  for (Collective op : kCollectives) {
    if (collective_name(op) == name) return op;
  }
  fail("{}: unknown collective '{}' (expected all_reduce, reduce_scatter, all_gather, broadcast, all_to_all or all_to_all_v)", what,
       name);
}

ReduceOp parse_reduce_op(std::string_view name, std::string_view what) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    if (reduce_op_name(op) == name) return op;
  }
  fail("{}: unknown reduction '{}' (expected sum, avg or max)", what, name);
}

Algorithm parse_algorithm(std::string_view name, std::string_view what) {
  if (name == "auto") return Algorithm::Auto;
  for (Algorithm algorithm : kConcreteAlgorithms) {
    if (algorithm_name(algorithm) == name) return algorithm;
  }
  fail("{}: unknown algorithm '{}' (expected auto, ring, rhd, recursive_doubling, binomial, "
       "hierarchical, shm, direct, direct_split, pairwise or mpi)",
       what, name);
}

bool implements(Algorithm algorithm, Collective op) {
  const bool exchange = op == Collective::AllToAll || op == Collective::AllToAllV;
  switch (algorithm) {
    case Algorithm::Auto: return true;
    case Algorithm::Mpi: return true;
    case Algorithm::Pairwise: return exchange;
    case Algorithm::Ring: return !exchange;
    case Algorithm::RecursiveHalvingDoubling:
      return op == Collective::AllReduce || op == Collective::ReduceScatter;
    case Algorithm::RecursiveDoubling: return op == Collective::AllReduce || op == Collective::AllGather;
    case Algorithm::BinomialTree: return op == Collective::AllReduce || op == Collective::Broadcast;
    case Algorithm::Hierarchical: return op == Collective::AllReduce || exchange;
    case Algorithm::SharedMemory: return op == Collective::AllReduce;
    case Algorithm::DirectRead:
    case Algorithm::DirectSplit: return op == Collective::AllReduce;
  }
  return false;
}

double bus_bandwidth_factor(Collective op, int ranks) {
  if (ranks <= 1) return op == Collective::Broadcast ? 1.0 : 0.0;
  double n = ranks;
  switch (op) {
    case Collective::AllReduce: return 2.0 * (n - 1.0) / n;
    case Collective::ReduceScatter:
    case Collective::AllGather:
    case Collective::AllToAll:
    case Collective::AllToAllV: return (n - 1.0) / n;
    case Collective::Broadcast: return 1.0;
  }
  return 1.0;
}

}  // namespace strata::comm
