#include "model/model_graph.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "graph/fusion.h"
#include "model/graph_emitter.h"

namespace strata {

namespace {

// Points the model's handles into a rewritten graph (-1 for values it dropped).
void adopt(ModelGraph& model, GraphRewriter::Result rewritten) {
  auto remap = [&](int& id) {
    if (id >= 0) id = rewritten.value_map.at(static_cast<size_t>(id));
  };
  for (int* id : {&model.tokens, &model.targets, &model.positions, &model.logits, &model.loss, &model.grads.seed,
                  &model.received, &model.sent, &model.head_copy, &model.router.balance, &model.router.z,
                  &model.router.expert_tokens, &model.router.expert_kept}) {
    remap(*id);
  }
  for (int& id : model.params) remap(id);
  std::map<int, int> grads;
  for (auto [param, grad] : model.grads.of) grads[rewritten(param)] = rewritten(grad);
  model.grads.of = std::move(grads);
  model.graph = std::move(rewritten.graph);
}

// Finds the stage-boundary nodes of a pipeline part by what they read and make.
ModelGraph::BoundaryNodes boundary_nodes(const ModelGraph& model) {
  ModelGraph::BoundaryNodes found;
  const int received_gradient = model.received >= 0 && model.grads.of.count(model.received)
                                    ? model.grads.of.at(model.received)
                                    : -1;
  for (int id = 0; id < model.graph.num_nodes(); ++id) {
    const Node& node = model.graph.node(id);
    if (node.op == "receive_from_stage") {
      (node.inputs[0] == model.received ? found.receive : found.receive_gradient) = id;
      STRATA_CHECK(node.inputs[0] == model.received || node.inputs[0] == model.grads.seed,
                   "a stage receive standing for neither the received value nor the sent one's gradient");
    } else if (node.op == "send_to_stage") {
      (node.outputs[0] == model.sent ? found.send : found.send_gradient) = id;
      STRATA_CHECK(node.outputs[0] == model.sent || node.outputs[0] == received_gradient,
                   "a stage send of neither the sent value nor the received one's gradient");
    }
  }
  return found;
}

std::set<int> read_after_run(const ModelGraph& model) {
  std::set<int> kept;
  for (int id : {model.loss, model.logits, model.sent, model.router.balance, model.router.z, model.router.expert_tokens,
                 model.router.expert_kept}) {
    if (id >= 0) kept.insert(id);
  }
  for (auto [value, grad] : model.grads.of) kept.insert(grad);
  return kept;
}

// The router losses of every moe_route the layers made (none in a dense model), summed over the layers
// as transformers' load_balancing_loss_func takes all layers' router logits at once, added to the loss.
void add_router_losses(GraphEmitter& emit, const ModelConfig& config, int64_t tokens, ModelGraph& model) {
  struct Router {
    int logits, routed, kept;
  };
  std::vector<Router> routers;  // ids, not nodes: emitting appends to the node list
  for (const Node& node : model.graph.nodes()) {
    if (node.op == "moe_route") routers.push_back({node.inputs[0], node.outputs[4], node.outputs[5]});
  }
  if (routers.empty()) return;
  int prob_sum = -1, z_sum = -1, expert_tokens = -1, expert_kept = -1;
  auto summed = [&](int total, int term) {
    return total < 0 ? term : emit.op("add", {total, term}, {}, "router_loss.sum");
  };
  for (const Router& router : routers) {
    const std::vector<int> terms = emit.ops("moe_router_loss_terms", {router.logits}, {}, "router_loss.terms");
    prob_sum = summed(prob_sum, terms[0]);
    z_sum = summed(z_sum, terms[1]);
    expert_tokens = summed(expert_tokens, router.routed);
    expert_kept = summed(expert_kept, router.kept);
  }
  const std::vector<int> losses =
      emit.ops("moe_aux_loss", {prob_sum, z_sum, expert_tokens},
               {{"tokens", tokens * static_cast<int64_t>(routers.size())},
                {"aux_coef", config.router_aux_loss_coef},
                {"z_coef", config.router_z_loss_coef}},
               "router_loss");
  model.loss = emit.op("add", {model.loss, losses[0]}, {}, "loss.with_router");
  model.router = {losses[1], losses[2], expert_tokens, expert_kept};
}

}  // namespace

std::string head_copy_name(const ModelConfig& config) {
  return model_family(config).tied_embedding(config) + "@lm_head";
}

ModelGraph build_model_graph(const ModelConfig& config, int64_t batch, int64_t seq, bool training,
                           const ModelBuildOptions& options) {
  config.validate();
  if (seq > config.block_size) fail("sequence length {} exceeds model.block_size {}", seq, config.block_size);
  const ModelFamily& family = model_family(config);
  ModelGraph model;
  Graph& g = model.graph;
  std::map<std::string, int> param;
  for (const ParamSpec& spec : family.param_specs(config)) {
    int id = g.add_param(spec.name, {spec.shape, options.dtype});
    param[spec.name] = id;
    model.params.push_back(id);
  }
  model.tokens = g.add_input("tokens", {{batch, seq}, DType::I32});
  model.targets = g.add_input("targets", {{batch, seq}, DType::I32});
  model.positions = g.add_input("positions", {{seq}, DType::I32});
  const std::string tied = family.tied_embedding(config);
  if (options.separate_head_copy && !tied.empty()) {
    model.head_copy = g.add_param(head_copy_name(config), g.value(param.at(tied)).meta);
  }
  bool building_head = false;
  GraphEmitter emit(g, options.precision, [&](const std::string& name, const Shape& shape) {
    auto found = param.find(name);
    STRATA_CHECK(found != param.end(), "the {} layers read parameter {}, which it does not declare", family.name(), name);
    int id = building_head && model.head_copy >= 0 && name == tied ? model.head_copy : found->second;
    STRATA_CHECK(g.value(id).meta.shape == shape, "{} parameter {} built as {}, used as {}", family.name(), name,
                 shape_str(g.value(id).meta.shape), shape_str(shape));
    return id;
  });
  int x = family.embed(emit, config, model.tokens, model.positions, 1);
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    x = family.block(emit, config, x, model.positions, layer_prefix(config, layer), 1);
  }
  const int normed = family.final_norm(emit, config, x);
  building_head = true;
  model.logits = family.lm_head(emit, config, normed, 1);
  model.loss = emit.op("cross_entropy", {model.logits, model.targets}, {}, "loss");
  add_router_losses(emit, config, batch * seq, model);
  ValueLayouts layouts;
  GradientLabels gradient_labels;
  if (options.parallelize) {
    ParallelForward part = options.parallelize(model.graph);
    adopt(model, std::move(part.rewritten));
    model.received = part.received;
    model.sent = part.sent;
    layouts = std::move(part.layouts);
    gradient_labels = std::move(part.gradient_labels);
  }
  if (training) {
    model.first_backward_node = g.num_nodes();
    std::vector<int> wrt;
    for (int param : model.params) {
      if (param >= 0) wrt.push_back(param);
    }
    if (model.head_copy >= 0) wrt.push_back(model.head_copy);
    if (model.received >= 0) wrt.push_back(model.received);
    GradientOrigins origins;
    model.grads = add_backward(g, model.loss >= 0 ? model.loss : model.sent, wrt, &origins);
    if (!layouts.empty()) {
      model.layouts = record_layouts(g, layouts, origins, model.first_backward_node);
      model.layouts.gradient_labels = std::move(gradient_labels);
    }
    if (options.recompute != RecomputeMode::None) {
      adopt(model, recompute_activations(model.graph, model.first_backward_node, options.recompute,
                                         segment_by_label_prefix(std::string(family.layer_prefix()))));
    }
  }
  if (options.fuse) adopt(model, fuse_all(model.graph, read_after_run(model)));
  if (training) {
    // Passes renumber nodes: the backward pass starts at the first node reading the seed.
    const std::vector<Node>& nodes = model.graph.nodes();
    auto reads_seed = [&](const Node& node) {
      return std::find(node.inputs.begin(), node.inputs.end(), model.grads.seed) != node.inputs.end();
    };
    model.first_backward_node = static_cast<int>(std::find_if(nodes.begin(), nodes.end(), reads_seed) - nodes.begin());
  }
  model.boundary = boundary_nodes(model);
  return model;
}

std::vector<ParameterCast> parameter_casts(const ModelGraph& model, DType dtype) {
  std::set<int> params(model.params.begin(), model.params.end());
  params.insert(model.head_copy);
  std::vector<ParameterCast> casts;
  for (const Node& node : model.graph.nodes()) {
    if (node.op == "cast" && params.count(node.inputs[0]) && node.inputs[0] >= 0 &&
        model.graph.value(node.outputs[0]).meta.dtype == dtype) {
      casts.push_back({node.inputs[0], node.outputs[0]});
    }
  }
  return casts;
}

Tensor position_ids(int64_t seq) {
  Tensor ids = Tensor::empty({seq}, DType::I32);
  for (int64_t i = 0; i < seq; ++i) ids.data<int32_t>()[i] = static_cast<int32_t>(i);
  return ids;
}

}  // namespace strata
