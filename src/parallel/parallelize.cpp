#include "parallel/parallelize.h"

namespace strata {

ParallelForward parallelize_forward(const Graph& forward, const ShardingPlan& plan, const std::string& layer_prefix,
                                    const RankLayout& layout) {
  ParallelForward result{parallelize_tensors(forward, plan, layout.tp)};
  if (layout.part.parts() <= 1) return result;
  ParallelForward part = cut_pipeline_part(result.rewritten.graph, layout.part, layer_prefix);
  part.rewritten = chain_rewrites(std::move(result.rewritten), std::move(part.rewritten));
  return part;
}

}  // namespace strata
