#pragma once
// Pipeline parallelism as the trainer sees it: this rank's stage, the sum of
// the tied embedding's two copies' gradients (first and last stage),
// and the values one stage has that every stage needs (the last stage's
// losses). One process is
// the same object with one stage.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "parallel/device_mesh.h"
#include "parallel/parallel_dimension.h"
#include "core/tensor.h"

namespace strata {

struct PipelineParallelSettings {
  int64_t pp = 1;                 // parallel.pp: pipeline stages (the layers cut into pp parts)
  std::string schedule = "1f1b";  // parallel.schedule: "1f1b", "gpipe" or "interleaved"
  int64_t virtual_stages = 1;     // parallel.virtual_stages: model chunks per stage (interleaved)
};

class PipelineParallel {
 public:
  PipelineParallel() = default;  // one stage
  // The pipeline group of this rank (DeviceMesh::group(MeshDimension::Pipeline)), rank = stage.
  explicit PipelineParallel(comm::Communicator group);
  // This rank's, along the mesh's pipeline dimension (one stage without a mesh or a cut).
  static PipelineParallel of(DeviceMesh* mesh);

  int degree() const { return group_ ? group_->size() : 1; }
  int stage() const { return group_ ? group_->rank() : 0; }
  bool first() const { return stage() == 0; }
  bool last() const { return stage() == degree() - 1; }

  // Transfers of whole contiguous tensors outside a step (the step's go through the graph's stage
  // boundary ops); a send's tensor must stay untouched until its handle completes.
  comm::Handle send_async(const Tensor& tensor, int stage);
  void receive(Tensor& tensor, int stage);

  // On the first and last stage: grad = the sum of both stages' copies (the same bits on both).
  void sum_tied_gradient(Tensor& grad);
  // The last stage's `values` on every stage (`count` of them; the others pass anything of that size).
  std::vector<double> from_last_stage(std::vector<double> values);

 private:
  std::optional<comm::Communicator> group_;
};

// The pipeline dimension's name: its process group's, which also carries the stage boundaries'
// point-to-point flows (the boundary ops' `group` attribute), and its config key's.
inline constexpr const char* kPipelineDimension = "pp";

// The layers cut into stages; outermost.
ParallelDimension pipeline_parallel_dimension();

}  // namespace strata
