#include "graph/executor.h"

#include <chrono>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/trace.h"

namespace strata {

CompiledGraph::CompiledGraph(const Graph& graph, Dispatcher& dispatcher, const std::set<int>& kept)
    : graph_(graph), dispatcher_(dispatcher), kept_(kept), plan_(plan_memory(graph, kept)) {
  slots_.push_back(make_slot());
  for (const Node& node : graph.nodes()) {
    const OpSchema& schema = OpRegistry::global().get(node.op);
    DType dtype = graph.value(node.inputs.at(schema.dtype_input)).meta.dtype;
    choices_.push_back(dispatcher.resolve(node.op, dtype));
  }
  timings_.resize(graph.nodes().size());
  supplied_.resize(graph.nodes().size(), false);
}

CompiledGraph::Slot CompiledGraph::make_slot() const {
  Slot slot;
  slot.arena = dispatcher_.backend().device().allocate(plan_.arena_bytes);
  slot.tensors.resize(static_cast<size_t>(graph_.num_values()));
  for (int id = 0; id < graph_.num_values(); ++id) {
    int64_t offset = plan_.offsets[static_cast<size_t>(id)];
    if (offset < 0) continue;
    const TensorMeta& meta = graph_.value(id).meta;
    slot.tensors[static_cast<size_t>(id)] = Tensor::view(slot.arena, static_cast<size_t>(offset), meta.shape, meta.dtype);
  }
  return slot;
}

void CompiledGraph::set_slots(int count) {
  STRATA_CHECK(count >= 1, "a compiled graph needs at least one slot, asked for {}", count);
  while (slots() > count) slots_.pop_back();
  while (slots() < count) {
    Slot slot = make_slot();
    // New slots start with slot 0's bindings (params, shared inputs, supplied values).
    for (int id = 0; id < graph_.num_values(); ++id) {
      const Value& info = graph_.value(id);
      if (info.kind != ValueKind::Intermediate || supplied_[static_cast<size_t>(info.producer)]) {
        slot.tensors[static_cast<size_t>(id)] = slots_.front().tensors[static_cast<size_t>(id)];
      }
    }
    slots_.push_back(std::move(slot));
  }
}

void CompiledGraph::bind(int value, const Tensor& tensor) {
  for (int slot = 0; slot < slots(); ++slot) bind(slot, value, tensor);
}

void CompiledGraph::bind(int slot, int value, const Tensor& tensor) {
  const Value& info = graph_.value(value);
  STRATA_CHECK(bindable(value), "cannot bind intermediate value '{}'", info.name);
  if (tensor.shape() != info.meta.shape || tensor.dtype() != info.meta.dtype) {
    fail("tensor bound to '{}' is {} {}, the graph needs {} {}", info.name, dtype_name(tensor.dtype()),
         shape_str(tensor.shape()), dtype_name(info.meta.dtype), shape_str(info.meta.shape));
  }
  STRATA_CHECK(tensor.is_contiguous(), "tensor bound to '{}' is not contiguous", info.name);
  Slot& target = slots_.at(static_cast<size_t>(slot));
  target.tensors[static_cast<size_t>(value)] = tensor;
  target.node_inputs.clear();  // rebuilt lazily: views changed
}

// A kept value's bytes are its own until the end of the run, so no other value is written through them; a
// supplied one is not written at all; one no node reads dies where it is made (the LM head's copy's gradient,
// collected at once), so its node alone sees where it went.
bool CompiledGraph::bindable(int value) const {
  const Value& info = graph_.value(value);
  if (info.kind != ValueKind::Intermediate || kept_.count(value)) return true;
  return supplied_[static_cast<size_t>(info.producer)] || plan_.lifetimes[static_cast<size_t>(value)].last == info.producer;
}

void CompiledGraph::supply(int value, const Tensor& tensor) {
  const Value& info = graph_.value(value);
  STRATA_CHECK(info.kind == ValueKind::Intermediate, "'{}' is not made by a node", info.name);
  const Node& node = graph_.node(info.producer);
  bool from_bound_values = node.outputs.size() == 1;
  for (int input : node.inputs) from_bound_values = from_bound_values && graph_.value(input).kind != ValueKind::Intermediate;
  STRATA_CHECK(from_bound_values, "'{}' is not the one output of a node reading params and inputs only", info.name);
  supplied_[static_cast<size_t>(info.producer)] = true;
  bind(value, tensor);
}

void CompiledGraph::withdraw(int value) {
  const int producer = graph_.value(value).producer;
  STRATA_CHECK(producer >= 0 && supplied_[static_cast<size_t>(producer)], "'{}' is not supplied",
               graph_.value(value).name);
  supplied_[static_cast<size_t>(producer)] = false;
  for (int slot = 0; slot < slots(); ++slot) unbind(slot, value);
}

void CompiledGraph::unbind(int slot, int value) {
  const int64_t offset = plan_.offsets.at(static_cast<size_t>(value));
  STRATA_CHECK(graph_.value(value).kind == ValueKind::Intermediate && offset >= 0,
               "'{}' has no bytes in the arena to go back to", graph_.value(value).name);
  Slot& target = slots_.at(static_cast<size_t>(slot));
  const TensorMeta& meta = graph_.value(value).meta;
  target.tensors[static_cast<size_t>(value)] = Tensor::view(target.arena, static_cast<size_t>(offset), meta.shape, meta.dtype);
  target.node_inputs.clear();
}

void CompiledGraph::prepare(Slot& slot) const {
  if (!slot.node_inputs.empty()) return;
  for (int id = 0; id < graph_.num_values(); ++id) {
    if (!slot.tensors[static_cast<size_t>(id)].defined()) fail("graph value '{}' is not bound", graph_.value(id).name);
  }
  slot.node_outputs.clear();
  for (const Node& node : graph_.nodes()) {
    Tensors inputs, outputs;
    for (int input : node.inputs) inputs.push_back(slot.tensors[static_cast<size_t>(input)]);
    for (int output : node.outputs) outputs.push_back(slot.tensors[static_cast<size_t>(output)]);
    slot.node_inputs.push_back(std::move(inputs));
    slot.node_outputs.push_back(std::move(outputs));
  }
}

void CompiledGraph::run_nodes(int slot_index, int begin, int end, const NodeHook& after_node) {
  Slot& slot = slots_.at(static_cast<size_t>(slot_index));
  prepare(slot);
  STRATA_CHECK(begin >= 0 && begin <= end && end <= graph_.num_nodes(), "nodes [{}, {}) of a graph of {}", begin, end,
               graph_.num_nodes());
  trace::Span run_span(trace_name_, "graph");
  trace::Tracer* const tracer = run_span.tracer();
  int tid = 0;
  if (tracer) [[unlikely]] {
    run_span.set_args(fmt::format(R"({{"slot":{},"nodes":[{},{}]}})", slot_index, begin, end));
    tid = tracer->thread_id();
    if (trace_args_.empty()) make_trace_args();
  }
  // A device's kernels run after they are queued: they are timed by its events, read once the
  // nodes are all queued, so that no node waits for the one before it.
  const Device& device = dispatcher_.backend().device();
  const bool device_clock = !device.is_host() && (profiling_ || tracer);
  std::vector<std::shared_ptr<DeviceEvent>> marks;  // before the first node, then after each node timed
  std::vector<size_t> timed;
  double anchor_us = 0;
  if (device_clock) [[unlikely]] {
    device.synchronize();
    anchor_us = trace::now_us();
    marks.push_back(device.record());
  }
  for (size_t i = static_cast<size_t>(begin); i < static_cast<size_t>(end); ++i) {
    if (supplied_[i]) {
      if (after_node) after_node(static_cast<int>(i));
      continue;
    }
    const Node& node = graph_.nodes()[i];
    if (device_clock) [[unlikely]] {
      dispatcher_.execute(choices_[i], slot.node_inputs[i], slot.node_outputs[i], node.attrs);
      marks.push_back(device.record());
      timed.push_back(i);
      if (after_node) after_node(static_cast<int>(i));
      continue;
    }
    auto start = profiling_ ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    const double trace_start = tracer ? trace::now_us() : 0.0;
    dispatcher_.execute(choices_[i], slot.node_inputs[i], slot.node_outputs[i], node.attrs);
    if (tracer) [[unlikely]] {
      tracer->add(node.op, "kernel", trace_start, trace::now_us() - trace_start, tid, trace_args_[i]);
    }
    if (profiling_) {
      timings_[i].seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++timings_[i].calls;
    }
    if (after_node) after_node(static_cast<int>(i));
  }
  for (size_t k = 0; k < timed.size(); ++k) {
    const size_t i = timed[k];
    const double seconds = marks[k + 1]->seconds_since(*marks[k]);
    if (tracer) tracer->add(graph_.nodes()[i].op, "kernel", anchor_us + marks[k]->seconds_since(*marks[0]) * 1e6,
                            seconds * 1e6, tid, trace_args_[i]);
    if (profiling_) {
      timings_[i].seconds += seconds;
      ++timings_[i].calls;
    }
  }
}

void CompiledGraph::make_trace_args() {
  trace_args_.clear();
  auto shapes = [&](const std::vector<int>& values) {
    nlohmann::json list = nlohmann::json::array();
    for (int value : values) list.push_back(shape_str(graph_.value(value).meta.shape));
    return list;
  };
  for (int id = 0; id < graph_.num_nodes(); ++id) {
    const Node& node = graph_.node(id);
    const KernelChoice& choice = choices_[static_cast<size_t>(id)];
    const OpCost cost = graph_.node_cost(id);
    nlohmann::json args = {{"label", node.label},
                           {"node", id},
                           {"graph", trace_name_},
                           {"dtype", dtype_name(choice.dtype)},
                           {"route", route_name(choice.route)},
                           {"inputs", shapes(node.inputs)},
                           {"outputs", shapes(node.outputs)},
                           {"flops", cost.flops},
                           {"bytes", cost.bytes}};
    trace_args_.push_back(args.dump());
  }
}

Tensor CompiledGraph::tensor(int slot, int value) const {
  return slots_.at(static_cast<size_t>(slot)).tensors.at(static_cast<size_t>(value));
}

}  // namespace strata
