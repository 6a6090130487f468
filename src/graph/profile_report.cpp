#include "graph/profile_report.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/core.h>

namespace strata {

std::vector<OpProfileRow> profile_by_op(const Graph& graph, const std::vector<NodeTiming>& timings) {
  STRATA_CHECK(timings.size() == graph.nodes().size(), "timings do not match the graph");
  std::map<std::string, std::set<DType>> dtypes_of_op;
  auto node_dtype = [&](int id) {
    const Node& node = graph.node(id);
    return graph.value(node.inputs.at(OpRegistry::global().get(node.op).dtype_input)).meta.dtype;
  };
  for (int id = 0; id < graph.num_nodes(); ++id) dtypes_of_op[graph.node(id).op].insert(node_dtype(id));

  std::map<std::string, OpProfileRow> rows;
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    std::string key = node.op;
    if (dtypes_of_op[node.op].size() > 1) key += fmt::format("/{}", dtype_name(node_dtype(id)));
    OpProfileRow& row = rows[key];
    row.op = key;
    const NodeTiming& timing = timings[static_cast<size_t>(id)];
    OpCost cost = graph.node_cost(id);
    row.nodes += 1;
    row.calls += timing.calls;
    row.seconds += timing.seconds;
    row.flops += cost.flops * static_cast<double>(timing.calls);
    row.bytes += cost.bytes * static_cast<double>(timing.calls);
  }
  std::vector<OpProfileRow> sorted;
  for (auto& [key, row] : rows) sorted.push_back(row);
  std::sort(sorted.begin(), sorted.end(), [](const OpProfileRow& a, const OpProfileRow& b) {
    return a.seconds != b.seconds ? a.seconds > b.seconds : a.op < b.op;
  });
  return sorted;
}

std::string format_op_profile(const std::vector<OpProfileRow>& rows, int64_t runs) {
  double total_seconds = 0, total_flops = 0;
  for (const OpProfileRow& row : rows) {
    total_seconds += row.seconds;
    total_flops += row.flops;
  }
  const double per_run = 1.0 / static_cast<double>(std::max<int64_t>(runs, 1));
  auto rate = [](double amount, double seconds) { return seconds > 0 ? amount / seconds / 1e9 : 0.0; };
  std::string out = fmt::format("{:<26} {:>5} {:>10} {:>6} {:>9} {:>8}\n", "op", "nodes", "ms/run", "share",
                                "GFLOP/s", "GB/s");
  for (const OpProfileRow& row : rows) {
    out += fmt::format("{:<26} {:>5} {:>10.2f} {:>5.1f}% {:>9.1f} {:>8.1f}\n", row.op, row.nodes,
                       row.seconds * per_run * 1e3, total_seconds > 0 ? 100 * row.seconds / total_seconds : 0.0,
                       rate(row.flops, row.seconds), rate(row.bytes, row.seconds));
  }
  out += fmt::format("{:<26} {:>5} {:>10.2f} {:>6} {:>9.1f}\n", "total", "", total_seconds * per_run * 1e3, "",
                     rate(total_flops, total_seconds));
  return out;
}

}  // namespace strata
