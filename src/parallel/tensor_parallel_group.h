#pragma once
// Tensor parallelism as the trainer sees it: this rank's place in its
// tensor-parallel group (for the graph pass, parallel/tensor_parallel.h).
// One process is the same object with a degree of 1.
#include <optional>

#include "comm/communicator.h"
#include "parallel/device_mesh.h"
#include "parallel/parallel_dimension.h"
#include "parallel/tensor_parallel.h"

namespace strata {

class TensorParallel {
 public:
  TensorParallel() = default;  // one rank
  // The tensor-parallel group of this rank (DeviceMesh::group(MeshDimension::Tensor)).
  explicit TensorParallel(comm::Communicator group);
  // This rank's, along the mesh's tensor-parallel dimension (one rank without a mesh or a split).
  static TensorParallel of(DeviceMesh* mesh);

  int degree() const { return group_ ? group_->size() : 1; }
  int rank() const { return group_ ? group_->rank() : 0; }
  TensorParallelRank graph_rank() const { return {degree(), rank(), "tp"}; }

 private:
  std::optional<comm::Communicator> group_;
};

// "tp": each layer split over the group; innermost (consecutive world ranks, inside a node).
ParallelDimension tensor_parallel_dimension();

}  // namespace strata
