#include "graph/rewrite.h"

namespace strata {

GraphRewriter::GraphRewriter(const Graph& source, const ParamMeta& param_meta, const KeepValue& keep)
    : source_(source), map_(static_cast<size_t>(source.num_values()), -1) {
  for (int id = 0; id < source.num_values(); ++id) {
    const Value& value = source.value(id);
    if (value.kind != ValueKind::Intermediate && keep && !keep(id)) continue;
    if (value.kind == ValueKind::Input) map_[static_cast<size_t>(id)] = target_.add_input(value.name, value.meta);
    if (value.kind == ValueKind::Param) {
      map_[static_cast<size_t>(id)] = target_.add_param(value.name, param_meta ? param_meta(value) : value.meta);
    }
  }
}

int GraphRewriter::map(int source_value) const {
  int mapped = map_.at(static_cast<size_t>(source_value));
  STRATA_CHECK(mapped >= 0, "graph rewrite: value '{}' used before it was produced", source_.value(source_value).name);
  return mapped;
}

bool GraphRewriter::is_mapped(int source_value) const { return map_.at(static_cast<size_t>(source_value)) >= 0; }

void GraphRewriter::set(int source_value, int target_value) {
  STRATA_CHECK(target_.value(target_value).meta == source_.value(source_value).meta,
               "graph rewrite: '{}' replaced by a value of another shape or dtype", source_.value(source_value).name);
  stand_for(source_value, target_value);
}

void GraphRewriter::stand_for(int source_value, int target_value) {
  map_.at(static_cast<size_t>(source_value)) = target_value;
  // A value a pass made to stand for another (a fused op's output) takes its name, so a value keeps
  // its identity through every pass (strata compare matches tensors by it).
  if (target_.value(target_value).kind == ValueKind::Intermediate) {
    target_.rename_value(target_value, source_.value(source_value).name);
  }
}

void GraphRewriter::set_resized(int source_value, int target_value) {
  STRATA_CHECK(target_.value(target_value).meta.dtype == source_.value(source_value).meta.dtype,
               "graph rewrite: '{}' replaced by a value of another dtype", source_.value(source_value).name);
  map_.at(static_cast<size_t>(source_value)) = target_value;
}

void GraphRewriter::set_retyped(int source_value, int target_value) {
  STRATA_CHECK(target_.value(target_value).meta.shape == source_.value(source_value).meta.shape,
               "graph rewrite: '{}' replaced by a value of another shape", source_.value(source_value).name);
  stand_for(source_value, target_value);
}

std::vector<int> GraphRewriter::copy_node(int node_id) {
  const Node& node = source_.node(node_id);
  std::vector<int> inputs;
  for (int input : node.inputs) inputs.push_back(map(input));
  std::vector<int> outputs = target_.apply(node.op, inputs, node.attrs, node.label);
  for (size_t i = 0; i < outputs.size(); ++i) set(node.outputs[i], outputs[i]);
  return outputs;
}

GraphRewriter::Result GraphRewriter::finish() && { return {std::move(target_), std::move(map_)}; }

GraphRewriter::Result chain_rewrites(GraphRewriter::Result first, GraphRewriter::Result second) {
  std::vector<int> value_map = std::move(first.value_map);
  for (int& mapped : value_map) {
    if (mapped >= 0) mapped = second.value_map.at(static_cast<size_t>(mapped));
  }
  return {std::move(second.graph), std::move(value_map)};
}

int GraphRewriter::Result::operator()(int source_value) const {
  int mapped = value_map.at(static_cast<size_t>(source_value));
  STRATA_CHECK(mapped >= 0, "graph rewrite dropped value {}", source_value);
  return mapped;
}

}  // namespace strata
