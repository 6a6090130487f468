#pragma once
// The emitter (see gpt2_block.h) that appends a model's ops to a graph,
// through autocast so the precision policy applies.
#include <functional>
#include <string>
#include <vector>

#include "graph/autocast.h"
#include "graph/graph.h"

namespace strata {

class GraphEmitter {
 public:
  using Value = int;
  // The graph value of parameter `name`, whose (shard) shape is `shape`.
  using ParamSource = std::function<int(const std::string& name, const Shape& shape)>;

  GraphEmitter(Graph& graph, const PrecisionPolicy& precision, ParamSource params)
      : ops_(graph, precision), params_(std::move(params)) {}

  int param(const std::string& name, const Shape& shape) { return params_(name, shape); }
  int op(const std::string& op, const std::vector<int>& inputs, const Attrs& attrs, const std::string& label) {
    return ops_.apply(op, inputs, attrs, label).at(0);
  }
  int attention(int qkv, int64_t heads, const std::string& label) {
    return op("attention", {qkv}, {{"n_head", heads}}, label);
  }

 private:
  Autocast ops_;
  ParamSource params_;
};

}  // namespace strata
