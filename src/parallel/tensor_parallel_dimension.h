#pragma once
// Tensor parallelism as a registered dimension ("tp"): each layer split over the group by the
// family's sharding plan (the graph pass, parallel/tensor_parallel.h), innermost (consecutive world
// ranks, inside a node, where its per-layer collectives are cheapest).
#include <cstdint>

#include "parallel/parallel_dimension.h"

namespace strata {

struct TensorParallelSettings {
  int64_t tp = 1;   // parallel.tp: tensor-parallel degree (Megatron's split of every layer)
  bool sp = false;  // parallel.sp: sequence parallelism over the tensor-parallel group
};

ParallelDimension tensor_parallel_dimension();

}  // namespace strata
