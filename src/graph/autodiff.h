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

// For each gradient value a backward pass made: the forward node input whose gradient (one
// use's term) it is. A sum of several uses' terms takes one of theirs; a value that is the
// gradient of several inputs (an add passes its output's on) keeps the first it was given.
struct GradientOrigin {
  int node = -1;
  int input = -1;
};
using GradientOrigins = std::map<int, GradientOrigin>;

// Differentiates `loss` with respect to each of `wrt`; every one of them must
// influence the loss. `origins`, when given, receives where each gradient value comes from.
Gradients add_backward(Graph& graph, int loss, const std::vector<int>& wrt, GradientOrigins* origins = nullptr);

}  // namespace strata
