#pragma once
// Every rank of a job, whatever its layout: which rank reports, how many share this host, and the
// agreements every rank takes part in (start-up checks, stops, a save's success, totals over the
// job). One process is the same object without a communicator. The checkpoint manager, the run
// record and the trace reach the job through it, never through a parallel dimension's group.
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/exact_square_sum.h"
#include "parallel/device_mesh.h"

namespace strata {

class JobWorld {
 public:
  JobWorld() = default;  // one process
  explicit JobWorld(comm::Communicator world);
  // The mesh's world (one process without a mesh).
  static JobWorld of(DeviceMesh* mesh);

  // The job's rank 0: prints progress, writes metrics and checkpoints.
  bool reports() const { return !world_ || world_->rank() == 0; }
  int rank() const { return world_ ? world_->rank() : 0; }
  int size() const { return world_ ? world_->size() : 1; }
  // Ranks of this job on this host (threads per rank default to cores / this).
  int ranks_on_this_host() const;
  // The largest of every rank's `signal`: all stop after the same step.
  int agree_on_stop(int signal);
  // True when every rank passed true (a barrier too).
  bool all_succeeded(bool mine);
  // `mine` combined over every rank by `op` (in f32: small integers exactly).
  double over_world(double mine, comm::ReduceOp op);
  // Every rank's `mine`, in rank order, on every rank.
  std::vector<double> gather(double mine);
  // The exact sum of every rank's exact square sum (integer bins: the same bits however the terms
  // are spread over the ranks).
  ExactSquareSum sum(const ExactSquareSum& mine);
  // Fails on every rank, naming the first differing key, when ranks of the job were started with
  // different resolved configs or different strata binaries.
  void check_ranks_agree(const std::string& resolved_config);

 private:
  std::optional<comm::Communicator> world_;
};

}  // namespace strata
