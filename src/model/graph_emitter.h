#pragma once
// The emitter (model/family.h) that appends a family's ops to a graph,
// through autocast so the precision policy applies.
#include <functional>
#include <string>
#include <vector>

#include "graph/autocast.h"
#include "graph/graph.h"
#include "model/family.h"

namespace strata {

class GraphEmitter final : public ModelEmitter {
 public:
  // The graph value of parameter `name`, whose whole shape is `shape` (the value may hold a part of it).
  using ParamSource = std::function<int(const std::string& name, const Shape& shape)>;

  GraphEmitter(Graph& graph, const PrecisionPolicy& precision, ParamSource params)
      : graph_(graph), ops_(graph, precision), params_(std::move(params)) {}

  int param(const std::string& name, const Shape& shape) override { return params_(name, shape); }
  Shape shape(int value) const override { return graph_.value(value).meta.shape; }
  std::vector<int> ops(const std::string& op, const std::vector<int>& inputs, const Attrs& attrs,
                       const std::string& label) override {
    return ops_.apply(op, inputs, attrs, label);
  }
  int attention(const std::string& op, const std::vector<int>& inputs, const Attrs& attrs,
                const std::string& label) override {
    return ops_.apply(op, inputs, attrs, label).at(0);
  }

 private:
  const Graph& graph_;
  Autocast ops_;
  ParamSource params_;
};

}  // namespace strata
