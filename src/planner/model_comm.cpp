#include "planner/model_comm.h"

#include "core/error.h"
#include "model/family.h"
#include "model/model_graph.h"
#include "parallel/parallelize.h"

namespace strata {

namespace {

// Adds part `part`'s calls: a layer's to `model.layer` (from the first part only: the two
// parts' layers are alike), the rest to the embedding (first part) or the head (last part).
void add_part_calls(const ModelGraph& part_graph, int part, const std::string& layer_prefix, ModelComm& model) {
  const Graph& g = part_graph.graph;
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& node = g.node(id);
    const OpCost cost = g.node_cost(id);
    if (cost.comm.empty()) continue;
    if (node.op == "send_to_stage" || node.op == "receive_from_stage") {
      if (id == part_graph.boundary.send) model.boundary_bytes = cost.comm.front().bytes;
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

ModelComm model_comm(const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp, bool sp, DType dtype) {
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
    add_part_calls(build_model_graph(two_layers, micro_batch, seq, /*training=*/true, options), part, prefix, model);
  }
  STRATA_CHECK(model.boundary_bytes > 0, "the planner's two-part model has no stage boundary");
  return model;
}

}  // namespace strata
