#pragma once
// Per-op gradient rules: each appends backward nodes to the graph.
#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"

namespace strata {

inline constexpr int kNoGradient = -1;

// Given the forward node and the gradients of its outputs (kNoGradient where an
// output has none), returns the gradient value of each input (kNoGradient for
// non-differentiable inputs such as indices).
using GradRule = std::function<std::vector<int>(Graph& graph, const Node& node, const std::vector<int>& output_grads)>;

const GradRule& grad_rule(const std::string& op);  // throws naming an op without a rule
std::vector<std::string> ops_with_grad_rules();      // sorted

}  // namespace strata
