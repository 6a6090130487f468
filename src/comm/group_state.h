#pragma once
// Internal: what a Communicator holds. Shared with the operations in flight,
// which keep it alive until they finish.
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "comm/communicator.h"
#include "comm/copy_pace.h"
#include "comm/engine.h"
#include "comm/shared_segment.h"

namespace strata::comm {

struct GroupState {
  GroupState() = default;
  GroupState(const GroupState&) = delete;
  GroupState& operator=(const GroupState&) = delete;
  ~GroupState();  // frees the MPI communicators (unless MPI is already finalised)

  std::string name;
  CommConfig config;
  Channel data;     // collectives
  Channel control;  // debug fingerprints
  Channel p2p;      // send/recv
  // Present when the hierarchical algorithm can run: same ranks on every node, >= 2 nodes, >= 2 per node.
  bool two_level = false;
  Channel local;   // the ranks of this rank's node
  Channel column;  // one rank per node: those with this rank's position in their node
  std::vector<int> node_of_rank;
  int nodes = 1;
  TopologyDesc topology;
  ModelOptions model;
  LinkSource link_source;
  uint64_t sequence = 0;
  uint64_t p2p_sequence = 0;
  Decision last_decision;
  mutable std::map<std::tuple<int, size_t, int>, Choice> choices;  // (collective, bytes, dtype) -> auto choice
  // (collective, bytes, dtype, algorithm) -> the model's seconds for a call whose algorithm is pinned: priced
  // once, not on every call (0.5 us of a 2.5 us 4 KiB all-to-all on the Xeon VM).
  mutable std::map<std::tuple<int, size_t, int, int>, double> pinned_predictions;
  // One-host groups: the shared segment, the next global chunk number, and
  // the shared-memory calls waiting for the segment (sequence numbers, in start order).
  std::unique_ptr<SharedSegment> shm;
  uint64_t shm_next_chunk = 0;
  std::deque<uint64_t> shm_queue;
  // The latest all-to-all whose peers may still read this rank's call header
  // and exchange area (0: none); it returned without waiting for them.
  uint64_t unread_exchange = 0;
  // How fast this rank's copies into its exchange area run now (the one-host all-to-all's choice to stage).
  CopyPace copy_pace;

  int rank() const { return data.rank; }
  int size() const { return data.size; }
};

// Whether the pairwise all-to-all reads its blocks straight from the senders
// (one host, a shared segment, cross-memory attach), as the cost model assumes.
inline bool reads_directly(const GroupState& group) {
  return group.shm != nullptr && group.topology.cross_memory && group.nodes == 1;
}

// The group's channels over `comm` (which it takes over), with dups for control and p2p.
void build_channels(GroupState& group, MPI_Comm comm);
// Records each rank's node (any labels; renumbered by first appearance) and,
// when two-level, splits the local and column channels (collective).
void place_nodes(GroupState& group, std::vector<int> node_of_rank);
// Gives a one-host group its shared segment (collective); without one (another
// host, or shm_open failing on any rank) the group runs without shm.
void attach_shared_memory(Communicator& group, GroupState& state);

}  // namespace strata::comm
