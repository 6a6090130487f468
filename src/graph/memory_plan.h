#pragma once
// Static memory planning: every intermediate value gets a byte offset in one
// preallocated arena. Two values may share bytes only when their lifetimes
// (from the producing node to the last consuming node) do not overlap.
#include <cstddef>
#include <set>
#include <vector>

#include "graph/graph.h"

namespace strata {

struct Lifetime {
  int first = 0;  // producing node
  int last = 0;   // last node that reads it (or the end, for kept values)
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // per value; -1 for inputs and params (bound from outside)
  std::vector<Lifetime> lifetimes;
  size_t arena_bytes = 0;        // the planned peak
  size_t unshared_bytes = 0;     // what giving every value its own buffer would take
};

// `kept` values (losses, gradients) stay live until the graph has finished.
MemoryPlan plan_memory(const Graph& graph, const std::set<int>& kept);

}  // namespace strata
