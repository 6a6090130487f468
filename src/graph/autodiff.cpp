#include "graph/autodiff.h"

#include <set>

#include "graph/grad_rules.h"

namespace strata {

Gradients add_backward(Graph& graph, int loss, const std::vector<int>& wrt, GradientOrigins* origins) {
  Gradients result;
  result.seed = graph.add_input("d_loss", graph.value(loss).meta);
  std::map<int, int> grad_of{{loss, result.seed}};

  // Only nodes between the targets and the loss need a backward pass.
  std::set<int> needed(wrt.begin(), wrt.end());
  int forward_nodes = graph.num_nodes();
  for (int id = 0; id < forward_nodes; ++id) {
    const Node& node = graph.node(id);
    for (int input : node.inputs) {
      if (needed.count(input)) needed.insert(node.outputs.begin(), node.outputs.end());
    }
  }

  for (int id = forward_nodes - 1; id >= 0; --id) {
    const Node node = graph.node(id);  // copy: the graph grows below
    std::vector<int> output_grads;
    bool any = false;
    for (int output : node.outputs) {
      auto found = grad_of.find(output);
      output_grads.push_back(found == grad_of.end() ? kNoGradient : found->second);
      any = any || found != grad_of.end();
    }
    if (!any) continue;
    bool feeds_target = false;
    for (int input : node.inputs) feeds_target = feeds_target || needed.count(input) != 0;
    if (!feeds_target) continue;
    std::vector<int> input_grads = grad_rule(node.op)(graph, node, output_grads);
    for (size_t i = 0; i < input_grads.size(); ++i) {
      int input = node.inputs[i];
      if (input_grads[i] == kNoGradient || !needed.count(input)) continue;
      if (origins) origins->emplace(input_grads[i], GradientOrigin{id, static_cast<int>(i)});
      auto existing = grad_of.find(input);
      if (existing == grad_of.end()) {
        grad_of[input] = input_grads[i];
      } else {  // a value used several times: gradients add up
        existing->second = graph.apply1("add", {existing->second, input_grads[i]}, {},
                                        graph.value(input).name + ".grad_sum");
        if (origins) origins->emplace(existing->second, GradientOrigin{id, static_cast<int>(i)});
      }
    }
  }
  for (int target : wrt) {
    auto found = grad_of.find(target);
    if (found == grad_of.end()) fail("'{}' does not influence the loss: no gradient", graph.value(target).name);
    result.of[target] = found->second;
  }
  return result;
}

}  // namespace strata
