#include "parallel/parallelize.h"

#include "parallel/parallel_dimension.h"

namespace strata {

namespace {

// `second` rewrote `first`'s graph: one rewrite of the original, the layouts and stage-boundary
// values `first` recorded carried to the values of `second` that stand for them.
ParallelForward chain(ParallelForward first, ParallelForward second) {
  const std::vector<int>& kept = second.rewritten.value_map;
  auto carried = [&](int value) { return value < 0 ? -1 : kept.at(static_cast<size_t>(value)); };
  for (const auto& [value, layout] : first.layouts) {
    if (const int now = carried(value); now >= 0) second.layouts.emplace(now, layout);
  }
  second.gradient_labels.insert(first.gradient_labels.begin(), first.gradient_labels.end());
  auto carry_all = [&](const std::vector<int>& values, std::vector<int>& into) {
    if (!into.empty()) return;
    for (int value : values) into.push_back(carried(value));
  };
  carry_all(first.received, second.received);
  carry_all(first.sent, second.sent);
  for (int value : first.without_gradient) second.without_gradient.insert(carried(value));
  second.rewritten = chain_rewrites(std::move(first.rewritten), std::move(second.rewritten));
  return second;
}

}  // namespace

RankLayout rank_layout(const MeshShape& shape, const MeshCoordinates& at, const DimensionOptions& options, int chunk) {
  RankLayout layout;
  for (const ParallelDimension& dimension : parallel_dimensions()) {
    if (!dimension.locate) continue;
    dimension.locate(layout, {.degree = shape.degree(dimension.name),
                              .coordinate = at.at(dimension.name),
                              .options = options,
                              .chunk = chunk});
  }
  return layout;
}

ParallelForward parallelize_forward(const Graph& forward, const ShardingPlan& plan, const std::string& layer_prefix,
                                    const RankLayout& layout) {
  const DimensionPassInput input{plan, layer_prefix, layout};
  std::optional<ParallelForward> done;
  for (const ParallelDimension& dimension : dimensions_innermost_first()) {
    if (!dimension.pass) continue;
    std::optional<ParallelForward> part = dimension.pass(done ? done->rewritten.graph : forward, input);
    if (!part) continue;
    done = done ? chain(std::move(*done), std::move(*part)) : std::move(part);
  }
  STRATA_CHECK(done.has_value(), "parallelize_forward with no dimension that splits the model");
  return std::move(*done);
}

}  // namespace strata
