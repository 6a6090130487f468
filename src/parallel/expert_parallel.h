#pragma once
// Expert parallelism ("ep"): the experts of every mixture-of-experts layer split over the group's
// ranks by whole experts (rank r holds experts [r E / P, (r + 1) E / P) of every stacked expert
// weight, the family's ShardingPlan::expert_stacked), each rank running its own micro-batches
// through the dense layers it holds whole, as a data-parallel replica does (torchtitan's choice:
// expert parallelism borrows data-parallel ranks, so the dense layers' gradients are summed over
// ep × dp and the experts' over dp only). The graph pass puts the token exchange around the experts:
// the rows a grouped GEMM reads in moe_permute's order go first through moe_dispatch_exchange (to the
// ranks holding their experts), its grouped GEMMs read this rank's experts, and the weighted combine
// reads their outputs back through moe_return_exchange. Which op is which is its placement rule
// (ExpertGroups, ExpertCombine, Elementwise between them), never its name; any other op reading the
// experts' rows is refused, naming the node, the op and parallel.ep.
#include <optional>
#include <string>

#include "model/model_graph.h"
#include "model/sharding_plan.h"
#include "parallel/device_mesh.h"
#include "parallel/parallel_dimension.h"

namespace strata {

struct ExpertParallelSettings {
  int64_t ep = 1;  // parallel.ep: expert-parallel degree (the experts split, each rank its own micro-batches)
};

struct ExpertParallelRank {
  int degree = 1;
  int rank = 0;
  std::string group = "ep";  // the collective group (ops/collective_group.h) of the exchange
};

// The part of `forward` rank `ep.rank` runs: the stacked expert weights take their E / P experts.
ParallelForward parallelize_experts(const Graph& forward, const ShardingPlan& plan, const ExpertParallelRank& ep);

// "ep": nested inside the data-parallel ranks, outside the tensor-parallel ones (the exchange's
// all-to-all is heavier than data parallelism's once-a-step reduction, lighter than tensor
// parallelism's per-layer ones); it splits the batch, places the stacked experts by whole experts.
ParallelDimension expert_parallel_dimension();

}  // namespace strata
