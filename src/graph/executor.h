#pragma once
// Runs a graph on a backend. Compilation resolves every node's kernel once
// (recording fallbacks), plans the arena and creates the tensor views; each
// run then only calls kernels.
#include <functional>
#include <memory>
#include <set>
#include <string>
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

  // Slots are independent copies of the arena (and of the bound inputs), for
  // micro-batches in flight at once (a pipeline stage runs a micro-batch's
  // forward, other micro-batches, then its backward). One by default.
  void set_slots(int count);
  int slots() const { return static_cast<int>(slots_.size()); }

  // Inputs and params are bound to tensors owned elsewhere (checked for shape
  // and dtype), in every slot or in one. So may a kept value be (a gradient,
  // bound where the trainer collects it: its node writes there, no copy), or
  // one that no node reads;
  // unbind puts it back in the slot's arena.
  void bind(int value, const Tensor& tensor);
  void bind(int slot, int value, const Tensor& tensor);
  void unbind(int slot, int value);
  // A value its node makes from params and inputs alone (a parameter's cast to bf16) supplied from
  // outside, kept up to date there: the node is skipped in every slot until withdraw().
  void supply(int value, const Tensor& tensor);
  void withdraw(int value);
  // `after_node(id)` runs after each node's kernel (the data-parallel runtime
  // starts gradient reductions there).
  using NodeHook = std::function<void(int node)>;
  void run(const NodeHook& after_node = {}) { run_nodes(0, 0, graph_.num_nodes(), after_node); }
  // Nodes [begin, end) in `slot` (a forward pass, then later its backward).
  void run_nodes(int slot, int begin, int end, const NodeHook& after_node = {});
  // The view of any value (intermediates: only while valid) in slot 0, or in `slot`.
  Tensor tensor(int value) const { return tensor(0, value); }
  Tensor tensor(int slot, int value) const;

  const Graph& graph() const { return graph_; }
  const MemoryPlan& memory_plan() const { return plan_; }
  const std::vector<KernelChoice>& kernel_choices() const { return choices_; }  // per node
  void enable_profiling(bool enabled) { profiling_ = enabled; }
  const std::vector<NodeTiming>& timings() const { return timings_; }
  // While a tracer records (core/trace.h), each run_nodes is a "graph" span named `name` and
  // each node a "kernel" span (op type; label, shapes, dtype, FLOPs and bytes in its args).
  void set_trace_name(std::string name) { trace_name_ = std::move(name); }

 private:
  struct Slot {
    std::shared_ptr<Buffer> arena;
    std::vector<Tensor> tensors;
    std::vector<Tensors> node_inputs;  // rebuilt lazily when bindings change
    std::vector<Tensors> node_outputs;
  };
  bool bindable(int value) const;
  Slot make_slot() const;
  void prepare(Slot& slot) const;
  void make_trace_args();

  const Graph& graph_;
  Dispatcher& dispatcher_;
  std::set<int> kept_;
  MemoryPlan plan_;
  std::vector<Slot> slots_;
  std::vector<KernelChoice> choices_;
  std::vector<bool> supplied_;  // per node: its output comes from outside, it is skipped
  bool profiling_ = false;
  std::vector<NodeTiming> timings_;
  std::string trace_name_ = "graph";
  std::vector<std::string> trace_args_;  // per node, made at the first traced run
};

}  // namespace strata
