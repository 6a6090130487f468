#pragma once
// The vocabulary shared by the cost model, the communicator and the benchmark:
// which collective, which reduction and which algorithm.
#include <array>
#include <string_view>

namespace strata::comm {

// AllToAll: rank i's block j goes to rank j's block i, all blocks of one size;
// AllToAllV: the same with a count per (sender, receiver) pair.
enum class Collective { AllReduce, ReduceScatter, AllGather, Broadcast, AllToAll, AllToAllV };
inline constexpr std::array kCollectives = {Collective::AllReduce, Collective::ReduceScatter, Collective::AllGather,
                                            Collective::Broadcast, Collective::AllToAll,      Collective::AllToAllV};

// Avg is a sum divided once by the group size at the end.
enum class ReduceOp { Sum, Avg, Max };

// Auto asks the cost model. RecursiveHalvingDoubling is Rabenseifner's
// reduce-scatter (recursive halving) followed by all-gather (recursive doubling).
// SharedMemory: ranks of one host sum each other's chunks in a shared segment.
// DirectRead: ranks of one host read each other's inputs (cross-memory attach).
// DirectSplit: the same reads, split: each rank reduces its slice from the
// others' inputs, then reads the other reduced slices (2(p-1)/p of the bytes).
// Pairwise: all-to-all as p - 1 exchanges with rank r + k and r - k; on one
// host the ranks read their blocks straight from the senders (cross-memory
// attach), between hosts they are MPI messages.
enum class Algorithm {
  Auto,
  Ring,
  RecursiveHalvingDoubling,
  RecursiveDoubling,
  BinomialTree,
  Hierarchical,
  SharedMemory,
  DirectRead,
  Pairwise,
  Mpi,
  DirectSplit,  // last: the values of the others stay as they were
};
// In order of preference when the cost model prices two alike: rhd before
// ring, as it moves each step as one message (fewer handshakes, and a
// receiver can pull a whole message while its sender is descheduled).
inline constexpr std::array kConcreteAlgorithms = {
    Algorithm::RecursiveHalvingDoubling, Algorithm::Ring,         Algorithm::RecursiveDoubling,
    Algorithm::BinomialTree,             Algorithm::Hierarchical, Algorithm::SharedMemory,
    Algorithm::DirectRead,               Algorithm::DirectSplit,  Algorithm::Pairwise,
    Algorithm::Mpi};
inline constexpr size_t kAlgorithmSlots = 11;  // indexable by static_cast<size_t>(Algorithm)

std::string_view collective_name(Collective op);  // "all_reduce", ...
std::string_view reduce_op_name(ReduceOp op);     // "sum", "avg", "max"
std::string_view algorithm_name(Algorithm algorithm);  // "ring", "rhd", "recursive_doubling", "shm", ...

// Parsers throw strata::Error naming `what` (a flag, key or variable) and the accepted values.
Collective parse_collective(std::string_view name, std::string_view what);
ReduceOp parse_reduce_op(std::string_view name, std::string_view what);
Algorithm parse_algorithm(std::string_view name, std::string_view what);

// Whether `algorithm` implements `op` at all (a pinned algorithm that does not
// is replaced by the automatic choice, and the decision says so).
bool implements(Algorithm algorithm, Collective op);

// nccl-tests' bus bandwidth factor: all_reduce 2(n-1)/n, reduce_scatter,
// all_gather and all_to_all(_v) (n-1)/n, broadcast 1.
double bus_bandwidth_factor(Collective op, int ranks);

}  // namespace strata::comm
