#include "graph/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "core/tensor.h"

namespace strata {

namespace {

size_t aligned(size_t bytes) { return (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment; }

bool overlaps(const Lifetime& a, const Lifetime& b) { return a.first <= b.last && b.first <= a.last; }

std::vector<Lifetime> lifetimes_of(const Graph& graph, const std::set<int>& kept) {
  std::vector<Lifetime> lifetimes(static_cast<size_t>(graph.num_values()));
  for (int id = 0; id < graph.num_values(); ++id) {
    int producer = graph.value(id).producer;
    lifetimes[static_cast<size_t>(id)] = {producer, producer};
  }
  for (int node = 0; node < graph.num_nodes(); ++node) {
    for (int input : graph.node(node).inputs) {
      Lifetime& life = lifetimes[static_cast<size_t>(input)];
      life.last = std::max(life.last, node);
    }
  }
  for (int id : kept) {
    STRATA_CHECK(id >= 0 && id < graph.num_values(), "kept value {} is not in the graph", id);
    lifetimes[static_cast<size_t>(id)].last = graph.num_nodes();
  }
  return lifetimes;
}

// The input `output` of `node` may take over: permitted by the schema, an
// intermediate of the same size and element count read by no later node (and
// only once by this one, so no other operand slot sees it change), not taken
// by another output already.
int takeover_candidate(const Graph& graph, int node_id, size_t output, const std::vector<Lifetime>& lifetimes,
                       const std::vector<bool>& taken) {
  const Node& node = graph.node(node_id);
  const TensorMeta& out = graph.value(node.outputs[output]).meta;
  for (const auto& [out_index, in_index] : OpRegistry::global().get(node.op).may_reuse) {
    STRATA_CHECK(out_index < node.outputs.size() && in_index < node.inputs.size(),
                 "op '{}' permits reuse of a slot it does not have", node.op);
    if (out_index != output) continue;
    int input = node.inputs[in_index];
    const Value& value = graph.value(input);
    if (value.kind != ValueKind::Intermediate || taken[static_cast<size_t>(input)]) continue;
    if (lifetimes[static_cast<size_t>(input)].last != node_id) continue;
    if (std::count(node.inputs.begin(), node.inputs.end(), input) != 1) continue;
    if (value.meta.nbytes() != out.nbytes() || shape_numel(value.meta.shape) != shape_numel(out.shape)) continue;
    return input;
  }
  return -1;
}

}  // namespace

MemoryPlan plan_memory(const Graph& graph, const std::set<int>& kept, const MemoryPlanOptions& options) {
  MemoryPlan plan;
  int values = graph.num_values();
  plan.offsets.assign(static_cast<size_t>(values), -1);
  plan.takes_over.assign(static_cast<size_t>(values), -1);
  plan.lifetimes = lifetimes_of(graph, kept);

  // Values joined by in-place takeovers form one buffer, live from the first
  // one's producer to the last one's last reader.
  std::vector<int> buffer_of(static_cast<size_t>(values));
  std::iota(buffer_of.begin(), buffer_of.end(), 0);
  if (options.in_place) {
    std::vector<bool> taken(static_cast<size_t>(values), false);
    for (int node = 0; node < graph.num_nodes(); ++node) {
      const std::vector<int>& outputs = graph.node(node).outputs;
      for (size_t output = 0; output < outputs.size(); ++output) {
        int input = takeover_candidate(graph, node, output, plan.lifetimes, taken);
        if (input < 0) continue;
        taken[static_cast<size_t>(input)] = true;
        plan.takes_over[static_cast<size_t>(outputs[output])] = input;
        buffer_of[static_cast<size_t>(outputs[output])] = buffer_of[static_cast<size_t>(input)];
      }
    }
  }
  struct Buffer {
    size_t size = 0;
    Lifetime life{0, -1};
  };
  std::vector<Buffer> buffers(static_cast<size_t>(values));
  std::vector<int> order;
  for (int id = 0; id < values; ++id) {
    if (graph.value(id).kind != ValueKind::Intermediate) continue;
    size_t size = aligned(graph.value(id).meta.nbytes());
    plan.unshared_bytes += size;
    Buffer& buffer = buffers[static_cast<size_t>(buffer_of[static_cast<size_t>(id)])];
    const Lifetime& life = plan.lifetimes[static_cast<size_t>(id)];
    if (buffer.life.last < buffer.life.first) {
      buffer.life = life;
      order.push_back(buffer_of[static_cast<size_t>(id)]);
    } else {
      buffer.life = {std::min(buffer.life.first, life.first), std::max(buffer.life.last, life.last)};
    }
    buffer.size = std::max(buffer.size, size);
  }

  // Greedy by size: place the largest buffers first at the lowest offset that
  // does not collide with an already placed buffer live at the same time.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return buffers[static_cast<size_t>(a)].size > buffers[static_cast<size_t>(b)].size;
  });
  struct Placed {
    size_t begin, end;
    Lifetime life;
  };
  std::vector<Placed> placed;
  std::vector<int64_t> buffer_offset(static_cast<size_t>(values), -1);
  for (int id : order) {
    const Buffer& buffer = buffers[static_cast<size_t>(id)];
    std::vector<std::pair<size_t, size_t>> busy;
    for (const Placed& other : placed) {
      if (overlaps(buffer.life, other.life)) busy.emplace_back(other.begin, other.end);
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + buffer.size <= begin) break;
      offset = std::max(offset, end);
    }
    placed.push_back({offset, offset + buffer.size, buffer.life});
    buffer_offset[static_cast<size_t>(id)] = static_cast<int64_t>(offset);
    plan.arena_bytes = std::max(plan.arena_bytes, offset + buffer.size);
  }
  for (int id = 0; id < values; ++id) {
    if (graph.value(id).kind == ValueKind::Intermediate) {
      plan.offsets[static_cast<size_t>(id)] = buffer_offset[static_cast<size_t>(buffer_of[static_cast<size_t>(id)])];
    }
  }
  return plan;
}

}  // namespace strata
