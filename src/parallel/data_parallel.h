#pragma once
// Data parallelism as the trainer sees it: which share of a step's
// micro-batches this rank runs, the sum of every rank's gradients and the
// step's losses in global order (what concerns every rank of the job is
// parallel/job_world.h's). One process is the same
// object with a degree of 1 and no communicator, so the training loop has a
// single code path for every layout.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "parallel/device_mesh.h"
#include "parallel/parallel_dimension.h"
#include "parallel/gradient_buckets.h"

namespace strata {

// The keys of the ranks sharing a step's micro-batches: their degree and their gradients' reduction.
struct DataParallelSettings {
  int64_t dp = 0;         // parallel.dp: data-parallel degree; 0: the job's ranks / the other degrees' product
  double bucket_mb = 25;  // parallel.bucket_mb: MiB of gradients per reduction (as PyTorch DDP)
  int64_t zero = 0;       // parallel.zero: 0; 1: AdamW's moments and update split over the dp ranks; 2: gradients too
};

// Micro-batches [first, first + count) of a step's global sequence.
struct MicroBatchShare {
  int64_t first = 0;
  int64_t count = 0;
};

class DataParallel {
 public:
  DataParallel() = default;  // one process
  // The group of this rank across `dimensions` (DeviceMesh::group_across).
  DataParallel(comm::Communicator group, std::vector<std::string> dimensions);
  // This rank's, across every batch-splitting dimension of the mesh (data and expert parallelism:
  // the ranks sharing a step's micro-batches); one process without a mesh.
  static DataParallel of(DeviceMesh* mesh);
  // This rank's across some of them: the replicas of a parameter the others split.
  static DataParallel over(DeviceMesh* mesh, const std::vector<std::string>& dimensions);

  // The dimensions its ranks differ along, innermost first (none for one process).
  const std::vector<std::string>& dimensions() const { return dimensions_; }

  int degree() const { return group_ ? group_->size() : 1; }
  int rank() const { return group_ ? group_->rank() : 0; }

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
  // out gets every rank's `count` floats of `in`, rank r's at r * count.
  void all_gather(const float* in, float* out, size_t count);
  // The values of all `total` micro-batches of a step, each rank giving those
  // of its share: in global order, the same vector on every rank.
  std::vector<double> gather(const std::vector<double>& mine, int64_t total);
  // Every rank's `mine` (the same length on each) added element by element, in rank order: the same
  // vector on every rank.
  std::vector<double> sum(const std::vector<double>& mine);
  void barrier();

 private:
  std::optional<comm::Communicator> group_;
  std::vector<std::string> dimensions_;
};

// "dp": replicas of the model, each running its share of a step's micro-batches; between the
// tensor-parallel ranks and the pipeline stages in the world.
ParallelDimension data_parallel_dimension();

}  // namespace strata
