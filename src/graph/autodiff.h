#pragma once
// Reverse-mode automatic differentiation on the graph IR: appends the backward
// nodes derived from per-op gradient rules.
#include <map>
#include <vector>

#include "graph/graph.h"

namespace strata {

struct Gradients {
  int seed = -1;             // graph input holding d(objective)/d(loss), shape of the loss
  std::map<int, int> of;     // value id -> gradient value id
};

// Differentiates `loss` with respect to each of `wrt`; every one of them must
// influence the loss.
Gradients add_backward(Graph& graph, int loss, const std::vector<int>& wrt);

}  // namespace strata
