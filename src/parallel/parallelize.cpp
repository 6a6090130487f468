#include "parallel/parallelize.h"

namespace strata {

ParallelForward parallelize_forward(const Graph& forward, const ShardingPlan& plan, const std::string& layer_prefix,
                                    const RankLayout& layout) {
  const bool split_layers = layout.tp.degree > 1, cut = layout.part.parts() > 1;
  STRATA_CHECK(split_layers || cut, "parallelize_forward without tensor or pipeline parallelism");
  if (!cut) return {parallelize_tensors(forward, plan, layout.tp)};
  if (!split_layers) return cut_pipeline_part(forward, layout.part, layer_prefix);
  GraphRewriter::Result split = parallelize_tensors(forward, plan, layout.tp);
  ParallelForward part = cut_pipeline_part(split.graph, layout.part, layer_prefix);
  part.rewritten = chain_rewrites(std::move(split), std::move(part.rewritten));
  return part;
}

}  // namespace strata
