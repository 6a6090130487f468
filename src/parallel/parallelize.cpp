#include "parallel/parallelize.h"

namespace strata {

ParallelForward parallelize_forward(const Graph& forward, const ShardingPlan& plan, const std::string& layer_prefix,
                                    const RankLayout& layout) {
  const bool split_layers = layout.tp.degree > 1, cut = layout.part.parts() > 1;
  STRATA_CHECK(split_layers || cut, "parallelize_forward without tensor or pipeline parallelism");
  if (!cut) {
    TensorParallelForward split = parallelize_tensors(forward, plan, layout.tp);
    return {.rewritten = std::move(split.rewritten), .layouts = std::move(split.layouts),
            .gradient_labels = std::move(split.gradient_labels)};
  }
  if (!split_layers) return cut_pipeline_part(forward, layout.part, layer_prefix);
  TensorParallelForward split = parallelize_tensors(forward, plan, layout.tp);
  ParallelForward part = cut_pipeline_part(split.rewritten.graph, layout.part, layer_prefix);
  // The part's values: those of the split graph it kept.
  for (const auto& [value, value_layout] : split.layouts) {
    const int kept = part.rewritten.value_map.at(static_cast<size_t>(value));
    if (kept >= 0) part.layouts[kept] = value_layout;
  }
  part.gradient_labels = std::move(split.gradient_labels);
  part.rewritten = chain_rewrites(std::move(split.rewritten), std::move(part.rewritten));
  return part;
}

}  // namespace strata
