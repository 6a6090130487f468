#include "planner/model_comm.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/family.h"
#include "model/model_graph.h"
#include "parallel/parallelize.h"

namespace strata {

namespace {

// Forward nodes that repeat an earlier one (the same op on the same inputs: the tensor-parallel entry of each
// linear reading one value, an all-gather or a copy_to_group whose backward is an all-reduce), by label: one
// call in a runtime that shares the entry.
std::set<std::string> repeated_entries(const ModelGraph& part_graph) {
  const Graph& g = part_graph.graph;
  std::set<std::pair<std::string, std::vector<int>>> seen;
  std::set<std::string> repeated;
  for (int id = 0; id < part_graph.first_backward_node; ++id) {
    const Node& node = g.node(id);
    if (!seen.insert({node.op, node.inputs}).second) repeated.insert(node.label);
  }
  return repeated;
}

// Whether a call belongs to a repeated entry: the entry itself in forward, or its conjugate in backward
// (autodiff labels the gradient of a collective's input `x` `<label>.grad_x`, graph/grad_rules.cpp).
bool repeats(const std::set<std::string>& repeated, const std::string& label) {
  const std::string suffix = ".grad_x";
  const size_t cut = label.size() - std::min(label.size(), suffix.size());
  const bool conjugate = label.compare(cut, std::string::npos, suffix) == 0;
  return repeated.count(conjugate ? label.substr(0, cut) : label) != 0;
}

// Adds part `part`'s calls: a layer's to `model.layer` (from the first part only: the two
// parts' layers are alike), the rest to the embedding (first part) or the head (last part).
void add_part_calls(const ModelGraph& part_graph, int part, const std::string& layer_prefix,
                    TensorParallelInput input, ModelComm& model) {
  const Graph& g = part_graph.graph;
  const std::set<std::string> repeated =
      input == TensorParallelInput::Shared ? repeated_entries(part_graph) : std::set<std::string>{};
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& node = g.node(id);
    const OpCost cost = g.node_cost(id);
    if (cost.comm.empty() || repeats(repeated, node.label)) continue;
    if (node.op == "send_to_stage" || node.op == "receive_from_stage") {
      // Every value the boundary carries forward (an activation; a mixture of experts' router sums too).
      const std::vector<int>& sends = part_graph.boundary.sends;
      if (std::count(sends.begin(), sends.end(), id)) model.boundary_bytes += cost.comm.front().bytes;
      continue;
    }
    const bool in_layer = node.label.rfind(layer_prefix, 0) == 0;
    if (in_layer && part != 0) continue;
    SegmentComm& segment = in_layer ? model.layer : part == 0 ? model.embedding : model.head;
    std::vector<CommWork>& calls = id < part_graph.first_backward_node ? segment.forward : segment.backward;
    for (const CommCall& call : cost.comm) {
      calls.push_back({node.label, call.pattern, call.bytes, static_cast<int>(node.attrs.get_int("ranks")),
                       g.value(node.inputs.at(0)).meta.dtype});
    }
  }
}

}  // namespace

ModelComm model_comm(const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp, bool sp, DType dtype,
                     TensorParallelInput input) {
  ModelConfig two_layers = config;
  two_layers.n_layer = 2;
  const ModelFamily& family = model_family(config);
  const std::string prefix(family.layer_prefix());
  ModelComm model;
  for (int part = 0; part < 2; ++part) {
    TensorParallelRank rank{.degree = tp, .rank = 0, .sequence_parallel = sp};
    const RankLayout layout{rank, PipelinePart{part, {1, 1}}};
    ModelBuildOptions options{.dtype = dtype};
    options.separate_head_copy = true;
    options.parallelize = [layout, plan = family.sharding_plan(), prefix](const Graph& forward) {
      return parallelize_forward(forward, plan, prefix, layout);
    };
    add_part_calls(build_model_graph(two_layers, micro_batch, seq, /*training=*/true, options), part, prefix, input,
                   model);
  }
  STRATA_CHECK(model.boundary_bytes > 0, "the planner's two-part model has no stage boundary");
  return model;
}

}  // namespace strata
