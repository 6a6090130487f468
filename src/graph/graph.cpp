#include "graph/graph.h"

namespace strata {

int Graph::add_value(Value value) {
  values_.push_back(std::move(value));
  return num_values() - 1;
}

int Graph::add_input(const std::string& name, const TensorMeta& meta) {
  return add_value({name, meta, ValueKind::Input, -1});
}

int Graph::add_param(const std::string& name, const TensorMeta& meta) {
  return add_value({name, meta, ValueKind::Param, -1});
}

std::vector<int> Graph::apply(const std::string& op, const std::vector<int>& inputs, const Attrs& attrs,
                              const std::string& label) {
  Metas input_metas;
  for (int input : inputs) input_metas.push_back(value(input).meta);
  const OpSchema& schema = OpRegistry::global().get(op);
  Metas output_metas;
  try {
    output_metas = OpRegistry::global().infer(op, input_metas, attrs);
  } catch (const Error& error) {
    fail("building graph node '{}': {}", label.empty() ? op : label, error.what());
  }
  Node node{op, inputs, {}, attrs, label};
  int node_id = num_nodes();
  for (size_t i = 0; i < output_metas.size(); ++i) {
    std::string name = (label.empty() ? op + "#" + std::to_string(node_id) : label) + ":" + schema.outputs[i];
    node.outputs.push_back(add_value({name, output_metas[i], ValueKind::Intermediate, node_id}));
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().outputs;
}

int Graph::find_value(const std::string& name) const {
  for (int id = 0; id < num_values(); ++id) {
    if (values_[static_cast<size_t>(id)].name == name) return id;
  }
  fail("graph has no value named '{}'", name);
}

OpCost Graph::node_cost(int node_id) const {
  const Node& n = node(node_id);
  Metas input_metas;
  for (int input : n.inputs) input_metas.push_back(value(input).meta);
  return OpRegistry::global().cost(n.op, input_metas, n.attrs);
}

OpCost Graph::total_cost() const {
  OpCost total;
  for (int id = 0; id < num_nodes(); ++id) {
    OpCost cost = node_cost(id);
    total.flops += cost.flops;
    total.bytes += cost.bytes;
  }
  return total;
}

}  // namespace strata
