#pragma once
// Reverse-mode automatic differentiation on the graph IR: appends the backward
// nodes derived from per-op gradient rules.
#include <map>
#include <set>
#include <vector>

#include "graph/graph.h"

namespace strata {

struct Gradients {
  int seed = -1;             // graph input holding d(objective)/d(loss), shape of the loss
  std::vector<int> seeds;    // one per objective, in their order (seeds[0] == seed)
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
// The same from several objectives at once, each seeded by its own input (a pipeline part sending
// several values: each one's gradient comes back from the next stage).
Gradients add_backward(Graph& graph, const std::vector<int>& objectives, const std::vector<int>& wrt,
                       GradientOrigins* origins = nullptr);

// Those of `values` that `objective` has a gradient with respect to (some may reach it only
// through values without one, such as counts), found on a scratch copy of the graph.
std::set<int> values_with_gradient(const Graph& graph, int objective, const std::vector<int>& values);

}  // namespace strata
