#include "graph/autodiff.h"

#include <set>

#include "graph/grad_rules.h"

namespace strata {

namespace {

// Appends the backward nodes from `grad_of` (each objective's seed) to every value of `wrt` the
// objectives reach; returns every gradient made, by value.
std::map<int, int> backpropagate(Graph& graph, std::map<int, int> grad_of, const std::vector<int>& wrt,
                                 GradientOrigins* origins) {
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
  return grad_of;
}

}  // namespace

Gradients add_backward(Graph& graph, int loss, const std::vector<int>& wrt, GradientOrigins* origins) {
  return add_backward(graph, std::vector<int>{loss}, wrt, origins);
}

Gradients add_backward(Graph& graph, const std::vector<int>& objectives, const std::vector<int>& wrt,
                       GradientOrigins* origins) {
  STRATA_CHECK(!objectives.empty(), "a backward pass with no objective");
  Gradients result;
  std::map<int, int> seeded;
  for (int objective : objectives) {
    // The first seed keeps the name it always had: one objective's graphs are unchanged.
    const std::string name = result.seeds.empty() ? "d_loss" : "d(" + graph.value(objective).name + ")";
    result.seeds.push_back(graph.add_input(name, graph.value(objective).meta));
    seeded.emplace(objective, result.seeds.back());
  }
  result.seed = result.seeds.front();
  const std::map<int, int> grad_of = backpropagate(graph, std::move(seeded), wrt, origins);
  for (int target : wrt) {
    auto found = grad_of.find(target);
    if (found == grad_of.end()) fail("'{}' does not influence the loss: no gradient", graph.value(target).name);
    result.of[target] = found->second;
  }
  return result;
}

std::set<int> values_with_gradient(const Graph& graph, int objective, const std::vector<int>& values) {
  Graph scratch = graph;
  std::map<int, int> seeded{{objective, scratch.add_input("d_objective", graph.value(objective).meta)}};
  const std::map<int, int> grad_of = backpropagate(scratch, std::move(seeded), values, nullptr);
  std::set<int> reached;
  for (int value : values) {
    if (grad_of.count(value)) reached.insert(value);
  }
  return reached;
}

}  // namespace strata
