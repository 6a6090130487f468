#include "graph/memory_plan.h"

#include <algorithm>
#include <numeric>

#include "core/tensor.h"

namespace strata {

namespace {

size_t aligned(size_t bytes) { return (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment; }

bool overlaps(const Lifetime& a, const Lifetime& b) { return a.first <= b.last && b.first <= a.last; }

}  // namespace

MemoryPlan plan_memory(const Graph& graph, const std::set<int>& kept) {
  MemoryPlan plan;
  int values = graph.num_values();
  plan.offsets.assign(static_cast<size_t>(values), -1);
  plan.lifetimes.resize(static_cast<size_t>(values));
  for (int id = 0; id < values; ++id) {
    int producer = graph.value(id).producer;
    plan.lifetimes[static_cast<size_t>(id)] = {producer, producer};
  }
  for (int node = 0; node < graph.num_nodes(); ++node) {
    for (int input : graph.node(node).inputs) {
      Lifetime& life = plan.lifetimes[static_cast<size_t>(input)];
      life.last = std::max(life.last, node);
    }
  }
  for (int id : kept) plan.lifetimes[static_cast<size_t>(id)].last = graph.num_nodes();

  // Greedy by size: place the largest values first at the lowest offset that
  // does not collide with an already placed value live at the same time.
  std::vector<int> order;
  for (int id = 0; id < values; ++id) {
    if (graph.value(id).kind == ValueKind::Intermediate) order.push_back(id);
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return graph.value(a).meta.nbytes() > graph.value(b).meta.nbytes();
  });
  struct Placed {
    size_t begin, end;
    Lifetime life;
  };
  std::vector<Placed> placed;
  for (int id : order) {
    size_t size = aligned(graph.value(id).meta.nbytes());
    const Lifetime& life = plan.lifetimes[static_cast<size_t>(id)];
    std::vector<std::pair<size_t, size_t>> busy;
    for (const Placed& other : placed) {
      if (overlaps(life, other.life)) busy.emplace_back(other.begin, other.end);
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [begin, end] : busy) {
      if (offset + size <= begin) break;
      offset = std::max(offset, end);
    }
    placed.push_back({offset, offset + size, life});
    plan.offsets[static_cast<size_t>(id)] = static_cast<int64_t>(offset);
    plan.arena_bytes = std::max(plan.arena_bytes, offset + size);
    plan.unshared_bytes += size;
  }
  return plan;
}

}  // namespace strata
