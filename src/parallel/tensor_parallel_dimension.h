#pragma once
// Tensor parallelism as a registered dimension ("tp"): each layer split over the group by the
// family's sharding plan (the graph pass, parallel/tensor_parallel.h), innermost (consecutive world
// ranks, inside a node, where its per-layer collectives are cheapest).
#include "parallel/parallel_dimension.h"

namespace strata {

ParallelDimension tensor_parallel_dimension();

}  // namespace strata
