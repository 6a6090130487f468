#include "parallel/tensor_parallel_group.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "model/family.h"
#include "parallel/parallelize.h"

namespace strata {

TensorParallel::TensorParallel(comm::Communicator group) : group_(std::move(group)) {}

TensorParallel TensorParallel::of(DeviceMesh* mesh) {
  const std::string& name = tensor_parallel_dimension().name;
  return mesh && mesh->shape().degree(name) > 1 ? TensorParallel(mesh->group(name)) : TensorParallel();
}


namespace {

std::optional<ParallelForward> split_layers(const Graph& forward, const DimensionPassInput& input) {
  std::optional<ParallelForward> split;
  if (input.layout.tp.degree <= 1) return split;
  TensorParallelForward part = parallelize_tensors(forward, input.plan, input.layout.tp);
  split = ParallelForward{.rewritten = std::move(part.rewritten),
                          .layouts = std::move(part.layouts),
                          .gradient_labels = std::move(part.gradient_labels)};
  return split;
}

// Each parameter the family's plan splits: rank t holds shard t; the others are replicated.
std::vector<ParameterPlacement> place_shards(const PlacementInput& input) {
  if (input.degree > 1 && input.model.n_head % input.degree != 0) {
    fail("parallel.tp = {} does not divide the model's {} heads (model.n_head)", input.degree, input.model.n_head);
  }
  const ShardingPlan plan = model_family(input.model).sharding_plan();
  std::vector<ParameterPlacement> placements(input.specs.size());
  for (size_t i = 0; i < input.specs.size(); ++i) {
    const ParamSpec& spec = input.specs[i];
    const ShardRule rule = plan.rule_for(spec.name);
    if (!ParameterShard(spec.name, spec.shape, rule, {input.degree, 0}).split()) continue;
    for (int t = 0; t < input.degree; ++t) {
      placements[i].shards.push_back(ParameterShard(spec.name, spec.shape, rule, {input.degree, t}).boxes());
    }
  }
  return placements;
}

}  // namespace

ParallelDimension tensor_parallel_dimension() {
  return {.name = "tp", .nesting = 0, .pass = split_layers, .place = place_shards};
}

}  // namespace strata
