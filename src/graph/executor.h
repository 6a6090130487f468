#pragma once
// Runs a graph on a backend. Compilation resolves every node's kernel once
// (recording fallbacks), plans the arena and creates the tensor views; each
// run then only calls kernels.
#include <functional>
#include <memory>
#include <set>
#include <vector>

#include "graph/memory_plan.h"
#include "ops/dispatcher.h"

namespace strata {

struct NodeTiming {
  double seconds = 0;
  int64_t calls = 0;
};

class CompiledGraph {
 public:
  // `kept` values remain readable after run() (loss, gradients, logits).
  CompiledGraph(const Graph& graph, Dispatcher& dispatcher, const std::set<int>& kept);

  // Inputs and params are bound to tensors owned elsewhere (checked for shape and dtype).
  void bind(int value, const Tensor& tensor);
  // `after_node(id)` runs after each node's kernel (the data-parallel runtime
  // starts gradient reductions there).
  using NodeHook = std::function<void(int node)>;
  void run(const NodeHook& after_node = {});
  Tensor tensor(int value) const;  // the view of any value (intermediates: only while valid)

  const Graph& graph() const { return graph_; }
  const MemoryPlan& memory_plan() const { return plan_; }
  const std::vector<KernelChoice>& kernel_choices() const { return choices_; }  // per node
  void enable_profiling(bool enabled) { profiling_ = enabled; }
  const std::vector<NodeTiming>& timings() const { return timings_; }

 private:
  const Graph& graph_;
  Dispatcher& dispatcher_;
  MemoryPlan plan_;
  std::shared_ptr<Buffer> arena_;
  std::vector<Tensor> tensors_;
  std::vector<KernelChoice> choices_;
  std::vector<Tensors> node_inputs_;
  std::vector<Tensors> node_outputs_;
  bool profiling_ = false;
  std::vector<NodeTiming> timings_;
};

}  // namespace strata
