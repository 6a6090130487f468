#pragma once
// Data parallelism as the trainer sees it: which share of a step's
// micro-batches this rank runs, the sum of every rank's gradients, the step's
// losses in global order, and which rank reports. One process is the same
// object with a degree of 1 and no communicator, so the training loop has a
// single code path for every layout.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "parallel/device_mesh.h"
#include "parallel/parallel_dimension.h"
#include "core/exact_square_sum.h"
#include "parallel/gradient_buckets.h"

namespace strata {

// Micro-batches [first, first + count) of a step's global sequence.
struct MicroBatchShare {
  int64_t first = 0;
  int64_t count = 0;
};

class DataParallel {
 public:
  DataParallel() = default;  // one process
  // The data-parallel group of this rank (DeviceMesh::group(MeshDimension::Data))
  // and the job's world, for what concerns every rank (start-up checks, stops).
  DataParallel(comm::Communicator group, comm::Communicator world);
  // This rank's, along the mesh's data-parallel dimension (one process without a mesh).
  static DataParallel of(DeviceMesh* mesh);

  int degree() const { return group_ ? group_->size() : 1; }
  int rank() const { return group_ ? group_->rank() : 0; }
  // The job's rank 0: prints progress, writes metrics and checkpoints.
  bool reports() const { return !world_ || world_->rank() == 0; }
  // Ranks of this job on this host (threads per rank default to cores / this).
  int ranks_on_this_host() const;
  // The largest of every rank of the job's `signal`: all stop after the same step.
  int agree_on_stop(int signal);
  // Over every rank of the job: true when every rank passed true (a barrier too).
  bool all_succeeded(bool mine);
  // Over every rank of the job: `mine` combined by `op` (in f32: small integers exactly).
  double over_world(double mine, comm::ReduceOp op);
  int world_rank() const { return world_ ? world_->rank() : 0; }
  int world_size() const { return world_ ? world_->size() : 1; }

  // Rank r of D takes the contiguous block [r*n/D, (r+1)*n/D) of a step's n
  // micro-batches: a single process running them in order reads the same
  // token windows. n need not divide evenly (validation batches).
  MicroBatchShare share(int64_t micro_batches) const;

  // Starts summing a gradient bucket over the ranks, in place (fp32, the
  // same bits on every rank). Only valid with more than one rank.
  comm::Handle sum_async(Tensor& bucket);
  // Starts summing `in` (degree() blocks) over the ranks, leaving this
  // rank's block of the sum in `block`; and the reverse, every rank's block
  // into `out`. f32; only valid with more than one rank.
  comm::Handle reduce_scatter_async(const Tensor& in, Tensor& block);
  comm::Handle all_gather_async(const Tensor& block, Tensor& out);
  // The exact sum over the ranks of their exact square sums.
  ExactSquareSum sum(const ExactSquareSum& mine);
  // out gets every rank's `count` floats of `in`, rank r's at r * count.
  void all_gather(const float* in, float* out, size_t count);
  // The values of all `total` micro-batches of a step, each rank giving those
  // of its share: in global order, the same vector on every rank.
  std::vector<double> gather(const std::vector<double>& mine, int64_t total);
  void barrier();

  // Fails on every rank, naming the first differing key, when ranks of the
  // job were started with different resolved configs or different strata binaries.
  void check_ranks_agree(const std::string& resolved_config);

 private:
  std::optional<comm::Communicator> group_;
  std::optional<comm::Communicator> world_;
};

// "dp": replicas of the model, each running its share of a step's micro-batches; between the
// tensor-parallel ranks and the pipeline stages in the world.
ParallelDimension data_parallel_dimension();

}  // namespace strata
