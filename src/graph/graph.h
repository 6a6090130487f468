#pragma once
// The static graph IR: values with fixed shapes, produced and consumed by op
// nodes. Nodes are appended in a valid execution order, so node order is the
// schedule (define, then run).
#include <string>
#include <vector>

#include "ops/schema.h"

namespace strata {

enum class ValueKind { Input, Param, Intermediate };

struct Value {
  std::string name;
  TensorMeta meta;
  ValueKind kind = ValueKind::Intermediate;
  int producer = -1;  // node index, -1 for inputs and params
};

struct Node {
  std::string op;
  std::vector<int> inputs;
  std::vector<int> outputs;
  Attrs attrs;
  std::string label;  // e.g. "h.3.attn.c_attn", for reports and profiles
};

class Graph {
 public:
  int add_input(const std::string& name, const TensorMeta& meta);
  int add_param(const std::string& name, const TensorMeta& meta);
  // Appends a node after checking it against the op's schema; returns its outputs.
  std::vector<int> apply(const std::string& op, const std::vector<int>& inputs, const Attrs& attrs = {},
                         const std::string& label = "");
  int apply1(const std::string& op, const std::vector<int>& inputs, const Attrs& attrs = {},
             const std::string& label = "") {
    return apply(op, inputs, attrs, label).at(0);
  }

  const Value& value(int id) const { return values_.at(static_cast<size_t>(id)); }
  const Node& node(int id) const { return nodes_.at(static_cast<size_t>(id)); }
  int num_values() const { return static_cast<int>(values_.size()); }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  const std::vector<Node>& nodes() const { return nodes_; }
  int find_value(const std::string& name) const;  // throws naming the value
  // Passes give a value that stands for another (a fused op's output) the other's name.
  void rename_value(int id, std::string name) { values_.at(static_cast<size_t>(id)).name = std::move(name); }

  OpCost node_cost(int node_id) const;
  OpCost total_cost() const;

 private:
  int add_value(Value value);
  std::vector<Value> values_;
  std::vector<Node> nodes_;
};

}  // namespace strata
