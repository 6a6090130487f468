#pragma once
// Settings of the communication layer. A program fills CommConfig from its
// own configuration, then apply_environment() lets STRATA_COMM_* variables
// override it (they are meant for experiments and debugging):
//   STRATA_COMM_TIMEOUT=seconds        no-progress timeout of every call (default 300)
//   STRATA_COMM_CHECK=overlapped | before | off   how ranks check that they make the same call
//                                      (default overlapped; see CallCheck)
//   STRATA_COMM_DEBUG=1                the same as STRATA_COMM_CHECK=before
//   STRATA_COMM_LOG=1                  log every algorithm decision on each group's rank 0
//   STRATA_COMM_ALGO=ring | all_reduce=ring,broadcast=binomial   pin algorithms
//   STRATA_COMM_TOPOLOGY=file.toml     use this cluster description instead of probing
//   STRATA_COMM_CACHE_DIR=dir          where probe results are cached
//   STRATA_COMM_REPROBE=1              probe even when a cached result exists
//   STRATA_COMM_CHUNK_BYTES=n          pipeline chunk size of the ring algorithms
//   STRATA_COMM_PIPELINE_DEPTH=n       chunks in flight per direction
//   STRATA_COMM_STAGING_BYTES=n        a rank's exchange area: the most bytes one rank stages per one-host
//                                      all_to_all or direct all_reduce (0: read every block and input)
//   STRATA_COMM_ALL_TO_ALL_STAGING_BYTES=n   a one-host all_to_all rank whose outgoing blocks exceed n
//                                      stages none (default: no limit; the cost model decides)
//   STRATA_COMM_RANKS_PER_NODE=n       pretend consecutive ranks form nodes of n (testing)
// Every rank must run with the same settings; the call check catches
// disagreements about algorithms.
#include <array>
#include <limits>
#include <string>
#include <string_view>

#include "comm/collective.h"
#include "comm/cost_model.h"

namespace strata::comm {

// Ranks that make different calls (another reduction, count, dtype, root or
// collective) must never get a silently wrong result. Each call's fingerprint
// (sequence number, collective, algorithm, count, dtype, reduction, root) is
// compared over the group:
//   Overlapped: exchanged alongside the call's data (one tiny non-blocking
//     message, its latency hidden by the call) and compared when the data has
//     moved: a mismatched call throws on every rank instead of returning.
//   Before: exchanged and compared before any data moves (one more latency
//     per call; names the call even where the data path would time out).
//   Off: no check (the data paths still catch mismatched message sizes).
enum class CallCheck { Off, Overlapped, Before };

struct CommConfig {
  double timeout_s = 300.0;
  CallCheck call_check = CallCheck::Overlapped;
  bool log_decisions = false;
  std::array<Algorithm, kCollectives.size()> pinned{};  // Auto: not pinned
  std::string pinned_by;                                // where the pins came from
  std::string topology_file;
  std::string cache_dir;
  bool reprobe = false;
  size_t chunk_bytes = kDefaultChunkBytes;
  int pipeline_depth = 4;
  // A rank's exchange area (see kDefaultStagingBytes): the one-host all_to_all's
  // blocks and the direct all-reduces' inputs past it are read from the
  // sender's memory by cross-memory attach.
  size_t exchange_staging_bytes = kDefaultStagingBytes;
  // A one-host all_to_all rank whose outgoing blocks exceed this stages none
  // of them (its peers read them). Unlimited by default: below it the cost
  // model decides from the probed rates (stages_all_to_all_blocks).
  size_t all_to_all_staging_bytes = std::numeric_limits<size_t>::max();
  int simulated_ranks_per_node = 0;

  // "ring" pins every collective that ring implements; "all_reduce=ring,
  // broadcast=binomial" pins per collective. `source` names the setting.
  void pin(std::string_view spec, std::string_view source);
  Algorithm pinned_for(Collective op) const { return pinned[static_cast<size_t>(op)]; }
  void apply_environment();
  // Throws strata::Error naming `source` when a value is out of range.
  void validate(std::string_view source) const;

  static CommConfig from_environment();
};

}  // namespace strata::comm
