#include "model/value_layout.h"

#include <algorithm>

namespace strata {

namespace {

ValueLayout layout_of(const Graph& graph, const ValueLayouts& layouts, int value) {
  auto found = layouts.find(value);
  if (found != layouts.end()) return found->second;
  ValueLayout whole;
  whole.shape = graph.value(value).meta.shape;
  return whole;
}

// The gradient of a node's input, from what the node read (Megatron's conjugate rules): a split
// input's gradient is split as the input is; a partial sum's (what a reduction reads) is whole, the
// reduction's gradient being a copy to every rank; a whole input of a node that also read a split
// one (a column-parallel linear's input, a sequence-parallel LayerNorm's weight) gets this rank's
// term of it, which the group's sum completes; any other whole input's gradient is whole.
ValueLayout gradient_layout(const std::vector<ValueLayout>& read, size_t input, const Shape& shape) {
  ValueLayout layout = read[input];
  layout.shape = shape;
  if (layout.kind == ValueLayout::Kind::Split) return layout;
  const auto sharded = std::find_if(read.begin(), read.end(),
                                    [](const ValueLayout& other) { return other.kind == ValueLayout::Kind::Split; });
  const bool partial = layout.kind == ValueLayout::Kind::Whole && sharded != read.end();
  layout.kind = partial ? ValueLayout::Kind::Partial : ValueLayout::Kind::Whole;
  layout.group = partial ? sharded->group : "";
  layout.dim = 0;
  layout.parts = 1;
  return layout;
}

}  // namespace

LayoutRecord record_layouts(const Graph& graph, const ValueLayouts& forward, const GradientOrigins& origins,
                            int first_backward_node) {
  LayoutRecord record;
  for (int id = 0; id < graph.num_values(); ++id) {
    const Value& value = graph.value(id);
    const bool made_forward = value.kind == ValueKind::Intermediate && value.producer < first_backward_node;
    if (value.kind != ValueKind::Param && !made_forward) continue;
    const ValueLayout layout = layout_of(graph, forward, id);
    if (layout.of_whole_model) record.values.emplace(value.name, layout);
  }
  for (const auto& [gradient, origin] : origins) {
    const Node& node = graph.node(origin.node);
    std::vector<ValueLayout> read;
    for (int input : node.inputs) read.push_back(layout_of(graph, forward, input));
    ValueLayout layout = gradient_layout(read, static_cast<size_t>(origin.input), graph.value(gradient).meta.shape);
    // The gradients of the pass's own collectives stand for none of the whole model's (a node making
    // a partial sum is the whole model's op on this rank's share), nor does a partial sum's: the
    // reduction's gradient, copied to every rank.
    layout.of_whole_model = read[static_cast<size_t>(origin.input)].kind != ValueLayout::Kind::Partial &&
                            std::all_of(node.outputs.begin(), node.outputs.end(), [&](int output) {
                              const ValueLayout made = layout_of(graph, forward, output);
                              return made.of_whole_model || made.kind == ValueLayout::Kind::Partial;
                            });
    if (layout.of_whole_model) record.values.emplace(graph.value(gradient).name, layout);
  }
  return record;
}

}  // namespace strata
