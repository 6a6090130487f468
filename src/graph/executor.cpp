#include "graph/executor.h"

#include <chrono>

namespace strata {

CompiledGraph::CompiledGraph(const Graph& graph, Dispatcher& dispatcher, const std::set<int>& kept)
    : graph_(graph), dispatcher_(dispatcher), plan_(plan_memory(graph, kept)) {
  arena_ = Buffer::allocate(plan_.arena_bytes);
  tensors_.resize(static_cast<size_t>(graph.num_values()));
  for (int id = 0; id < graph.num_values(); ++id) {
    int64_t offset = plan_.offsets[static_cast<size_t>(id)];
    if (offset < 0) continue;
    const TensorMeta& meta = graph.value(id).meta;
    tensors_[static_cast<size_t>(id)] = Tensor::borrow(arena_->data() + offset, meta.shape, meta.dtype);
  }
  for (const Node& node : graph.nodes()) {
    const OpSchema& schema = OpRegistry::global().get(node.op);
    DType dtype = graph.value(node.inputs.at(schema.dtype_input)).meta.dtype;
    choices_.push_back(dispatcher.resolve(node.op, dtype));
  }
  timings_.resize(graph.nodes().size());
}

void CompiledGraph::bind(int value, const Tensor& tensor) {
  const Value& info = graph_.value(value);
  STRATA_CHECK(info.kind != ValueKind::Intermediate, "cannot bind intermediate value '{}'", info.name);
  if (tensor.shape() != info.meta.shape || tensor.dtype() != info.meta.dtype) {
    fail("tensor bound to '{}' is {} {}, the graph needs {} {}", info.name, dtype_name(tensor.dtype()),
         shape_str(tensor.shape()), dtype_name(info.meta.dtype), shape_str(info.meta.shape));
  }
  STRATA_CHECK(tensor.is_contiguous(), "tensor bound to '{}' is not contiguous", info.name);
  tensors_[static_cast<size_t>(value)] = tensor;
  node_inputs_.clear();  // rebuilt lazily: views changed
}

void CompiledGraph::run(const NodeHook& after_node) {
  if (node_inputs_.empty()) {
    for (int id = 0; id < graph_.num_values(); ++id) {
      if (!tensors_[static_cast<size_t>(id)].defined()) fail("graph value '{}' is not bound", graph_.value(id).name);
    }
    node_outputs_.clear();
    for (const Node& node : graph_.nodes()) {
      Tensors inputs, outputs;
      for (int input : node.inputs) inputs.push_back(tensors_[static_cast<size_t>(input)]);
      for (int output : node.outputs) outputs.push_back(tensors_[static_cast<size_t>(output)]);
      node_inputs_.push_back(std::move(inputs));
      node_outputs_.push_back(std::move(outputs));
    }
  }
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Node& node = graph_.nodes()[i];
    auto start = profiling_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    dispatcher_.execute(choices_[i], node_inputs_[i], node_outputs_[i], node.attrs);
    if (profiling_) {
      timings_[i].seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++timings_[i].calls;
    }
    if (after_node) after_node(static_cast<int>(i));
  }
}

Tensor CompiledGraph::tensor(int value) const { return tensors_.at(static_cast<size_t>(value)); }

}  // namespace strata
