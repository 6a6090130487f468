#pragma once
// The forward graph one rank runs: every registered dimension's graph pass in turn, innermost
// first (parallel_dimension.h): the tensor-parallel part of every layer (tensor_parallel.h), the
// experts of its expert-parallel rank with their token exchange (expert_parallel.h), then the layers
// of its pipeline stage (pipeline_part.h).
#include <string>

#include "parallel/device_mesh.h"
#include "parallel/expert_parallel.h"
#include "parallel/pipeline_part.h"
#include "parallel/tensor_parallel.h"

namespace strata {

// Where a rank sits along each dimension with a graph pass.
struct RankLayout {
  TensorParallelRank tp;
  PipelinePart part;  // no parts, or one: the whole model
  ExpertParallelRank ep;

  // Whether any dimension's pass changes the whole model's graph here.
  bool splits_model() const { return tp.degree > 1 || part.parts() > 1 || ep.degree > 1; }
};

// Where the rank at `at` sits for its model part `chunk`: each dimension with a `locate` places it.
RankLayout rank_layout(const MeshShape& shape, const MeshCoordinates& at, const DimensionOptions& options, int chunk);

ParallelForward parallelize_forward(const Graph& forward, const ShardingPlan& plan, const std::string& layer_prefix,
                                    const RankLayout& layout);

}  // namespace strata
