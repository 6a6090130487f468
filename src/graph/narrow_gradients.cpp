#include "graph/narrow_gradients.h"

#include <vector>

namespace strata {

GraphRewriter::Result keep_gradients_narrow(const Graph& graph, const std::set<int>& gradients) {
  std::vector<int> readers(static_cast<size_t>(graph.num_values()), 0);
  for (const Node& node : graph.nodes()) {
    for (int input : node.inputs) ++readers[static_cast<size_t>(input)];
  }
  auto widens_alone = [&](int gradient) {
    const int producer = graph.value(gradient).producer;
    if (producer < 0 || readers[static_cast<size_t>(gradient)] != 0) return false;
    const Node& cast = graph.node(producer);
    if (cast.op != "cast" || graph.value(gradient).meta.dtype != DType::F32) return false;
    const DType narrow = graph.value(cast.inputs[0]).meta.dtype;
    return (narrow == DType::BF16 || narrow == DType::F16) && readers[static_cast<size_t>(cast.inputs[0])] == 1;
  };
  std::vector<bool> narrowed(static_cast<size_t>(graph.num_nodes()), false);
  for (int gradient : gradients) {
    if (widens_alone(gradient)) narrowed[static_cast<size_t>(graph.value(gradient).producer)] = true;
  }
  GraphRewriter rewriter(graph);
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    if (!narrowed[static_cast<size_t>(id)]) {
      rewriter.copy_node(id);
      continue;
    }
    const DType narrow = graph.value(node.inputs[0]).meta.dtype;
    const int copy = rewriter.target().apply1("cast", {rewriter.map(node.inputs[0])},
                                              {{"dtype", std::string(dtype_name(narrow))}}, node.label);
    rewriter.set_retyped(node.outputs[0], copy);
  }
  return std::move(rewriter).finish();
}

}  // namespace strata
