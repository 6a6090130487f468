#pragma once
// Static memory planning: every intermediate value gets a byte offset in one
// preallocated arena. Two values may share bytes only when their lifetimes
// (from the producing node to the last consuming node) do not overlap, or when
// one takes over the other in place: an op whose schema permits it
// (OpSchema::may_reuse) writes its output into an input of the same size that
// no later node reads.
#include <cstddef>
#include <set>
#include <vector>

#include "graph/graph.h"

namespace strata {

struct Lifetime {
  int first = 0;  // producing node
  int last = 0;   // last node that reads it (or the end, for kept values)
};

struct MemoryPlanOptions {
  bool in_place = true;  // let outputs take over dying inputs where the op permits
};

struct MemoryPlan {
  std::vector<int64_t> offsets;  // per value; -1 for inputs and params (bound from outside)
  std::vector<Lifetime> lifetimes;
  std::vector<int> takes_over;   // per value: the input whose bytes it took over in place, or -1
  size_t arena_bytes = 0;        // the planned peak
  size_t unshared_bytes = 0;     // what giving every value its own buffer would take
};

// `kept` values (losses, gradients) stay live until the graph has finished.
MemoryPlan plan_memory(const Graph& graph, const std::set<int>& kept, const MemoryPlanOptions& options = {});

}  // namespace strata
