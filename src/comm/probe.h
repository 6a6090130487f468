#pragma once
// The start-up probe: short measurements of this job's links, and the cache
// that saves repeating them. Under a second (0.6-0.8 s for 2-4 ranks here).
//   intra latency    ping-pong of 4 bytes between two ranks of one node, and of
//                    1 KiB to 256 KiB messages (the message times MPI-based
//                    algorithms' steps are priced with)
//   intra bandwidth  8 MiB exchanges, all ranks of every node paired at once
//   inter latency    ping-pong between the first ranks of nodes 0 and 1
//   inter bandwidth  8 MiB exchanges between every rank of node 0 and its
//                    counterpart on node 1 at once (so: the node link's total)
//   reduce           fp32 sums of two 8 MiB arrays, per rank
//   memory           32 MiB memcpy by every rank at once: the bytes per second
//                    a node's ranks copy together (its ranks' total over the slowest)
//   cache            the node's last-level cache, from hwloc (not measured)
//   copy, cross read 4 KiB, 32 KiB, 256 KiB and 8 MiB blocks, freshly written,
//                    copied through a shared exchange area to the paired rank
//                    (copy in, copy out) and read from the paired rank's memory
//                    (cross-memory attach), all ranks of every node at once, one
//                    block at a time, best of seven: rates per block size
//                    (nodes of >= 2 ranks with shared memory; reads where permitted)
// Each figure is the worst over the ranks involved (so every rank holds the
// same figures) and the best of three runs. The cache holds the median over the
// first kSettlingProbes launches' probes (probe_history.h).
#include <filesystem>
#include <string>

#include "comm/cluster_file.h"
#include "comm/communicator.h"

namespace strata::comm {

// Collective over `group`. Figures a layout cannot measure (intra with one
// rank per node, inter on one node) copy the other level.
ClusterDescription probe_links(Communicator& group);

// Where probe results for a launch layout described by `key` are cached.
std::filesystem::path probe_cache_path(const CommConfig& config, const std::string& key);

struct ResolvedLinks {
  ClusterDescription description;
  LinkSource source;
};

// World start-up (collective): rank 0 reads config.topology_file, or a cached
// probe whose key matches and whose layout has settled (kSettlingProbes probes
// kept), or the group probes and rank 0 writes the figures the layout's kept
// probes settle on to the cache; every rank gets rank 0's figures. A broken
// file fails on every rank.
ResolvedLinks resolve_links(Communicator& world, const std::string& key);

}  // namespace strata::comm
