#include "model/model_graph.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "graph/fusion.h"
#include "graph/narrow_gradients.h"
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
  for (std::vector<int>* ids : {&model.params, &model.received_values, &model.sent_values, &model.grads.seeds}) {
    for (int& id : *ids) remap(id);
  }
  std::map<int, int> grads;
  for (auto [param, grad] : model.grads.of) grads[rewritten(param)] = rewritten(grad);
  model.grads.of = std::move(grads);
  model.graph = std::move(rewritten.graph);
}

// Appends `nodes` to `ordered` in the order of the values they stand for (`value_of`) in `values`;
// returns the first (-1 for none).
template <typename ValueOf>
int in_order_of(const std::vector<int>& values, const std::vector<int>& nodes, const ValueOf& value_of,
                std::vector<int>& ordered) {
  for (int value : values) {
    for (int node : nodes) {
      if (value_of(node) == value) ordered.push_back(node);
    }
  }
  STRATA_CHECK(ordered.size() == nodes.size(), "a stage transfer standing for no boundary value");
  return ordered.empty() ? -1 : ordered.front();
}

// Finds the stage-boundary nodes of a pipeline part by what they read and make.
ModelGraph::BoundaryNodes boundary_nodes(const ModelGraph& model) {
  std::vector<int> receives, sends;
  for (int id = 0; id < model.graph.num_nodes(); ++id) {
    const std::string& op = model.graph.node(id).op;
    if (op == "receive_from_stage") receives.push_back(id);
    if (op == "send_to_stage") sends.push_back(id);
  }
  std::vector<int> received_gradients;  // of the received values the loss has a gradient for, in order
  for (int value : model.received_values) {
    if (model.grads.of.count(value)) received_gradients.push_back(model.grads.of.at(value));
  }
  auto input_of = [&](int node) { return model.graph.node(node).inputs[0]; };
  auto output_of = [&](int node) { return model.graph.node(node).outputs[0]; };
  std::vector<int> forward_receives, backward_receives, forward_sends, backward_sends;
  for (int node : receives) {
    const bool forward = std::count(model.received_values.begin(), model.received_values.end(), input_of(node)) > 0;
    (forward ? forward_receives : backward_receives).push_back(node);
  }
  for (int node : sends) {
    const bool forward = std::count(model.sent_values.begin(), model.sent_values.end(), output_of(node)) > 0;
    (forward ? forward_sends : backward_sends).push_back(node);
  }
  ModelGraph::BoundaryNodes found;
  found.receive = in_order_of(model.received_values, forward_receives, input_of, found.receives);
  found.send = in_order_of(model.sent_values, forward_sends, output_of, found.sends);
  // A last part's seed is the loss's: it has no receive.
  found.receive_gradient = in_order_of(model.loss >= 0 ? std::vector<int>{} : model.grads.seeds, backward_receives,
                                       input_of, found.receive_gradients);
  found.send_gradient = in_order_of(received_gradients, backward_sends, output_of, found.send_gradients);
  return found;
}

std::set<int> read_after_run(const ModelGraph& model) {
  std::set<int> kept(model.sent_values.begin(), model.sent_values.end());
  for (int id : {model.loss, model.logits, model.router.balance, model.router.z, model.router.expert_tokens,
                 model.router.expert_kept}) {
    if (id >= 0) kept.insert(id);
  }
  for (auto [value, grad] : model.grads.of) kept.insert(grad);
  return kept;
}

// A mixture of experts' router terms summed over the layers emitted so far (-1 before the first router).
struct RouterSums {
  int prob = -1, z = -1, routed = -1, kept = -1;
  int64_t routers = 0;
};

// Adds the router terms of the moe_route nodes from `first_node` on (one layer's; none in a dense
// layer) to the running sums, labelled as the layer's own ops: a pipeline stage boundary then carries
// the sums on with the activation, and the last stage's loss sees every layer's.
void add_layer_router_terms(GraphEmitter& emit, const Graph& g, int first_node, const std::string& layer,
                            RouterSums& sums) {
  struct Router {
    int logits, routed, kept;
  };
  std::vector<Router> routers;  // ids, not nodes: emitting appends to the node list
  for (int id = first_node; id < g.num_nodes(); ++id) {
    const Node& node = g.node(id);
    if (node.op == "moe_route") routers.push_back({node.inputs[0], node.outputs[4], node.outputs[5]});
  }
  auto summed = [&](int total, int term) {
    return total < 0 ? term : emit.op("add", {total, term}, {}, layer + "router_loss.sum");
  };
  for (const Router& router : routers) {
    const std::vector<int> terms = emit.ops("moe_router_loss_terms", {router.logits}, {}, layer + "router_loss.terms");
    sums.prob = summed(sums.prob, terms[0]);
    sums.z = summed(sums.z, terms[1]);
    sums.routed = summed(sums.routed, router.routed);
    sums.kept = summed(sums.kept, router.kept);
    ++sums.routers;
  }
}

// The router losses over every layer's sums (none in a dense model), added to the loss, as
// transformers' load_balancing_loss_func takes all layers' router logits at once.
void add_router_losses(GraphEmitter& emit, const ModelConfig& config, int64_t tokens, const RouterSums& sums,
                       ModelGraph& model) {
  if (sums.routers == 0) return;
  const std::vector<int> losses = emit.ops("moe_aux_loss", {sums.prob, sums.z, sums.routed},
                                           {{"tokens", tokens * sums.routers},
                                            {"aux_coef", config.router_aux_loss_coef},
                                            {"z_coef", config.router_z_loss_coef}},
                                           "router_loss");
  model.loss = emit.op("add", {model.loss, losses[0]}, {}, "loss.with_router");
  model.router = {losses[1], losses[2], sums.routed, sums.kept};
}

// The training graph's backward pass: from the loss, or in a pipeline part without it from every sent
// value the loss has a gradient for, to every parameter and every received value with a gradient.
Gradients add_model_backward(ModelGraph& model, const std::set<int>& without_gradient, GradientOrigins& origins) {
  std::vector<int> wrt;
  for (int param : model.params) {
    if (param >= 0) wrt.push_back(param);
  }
  if (model.head_copy >= 0) wrt.push_back(model.head_copy);
  std::vector<int> objectives;
  if (model.loss >= 0) objectives.push_back(model.loss);
  for (int value : model.received_values) {
    if (!without_gradient.count(value)) wrt.push_back(value);
  }
  for (int value : model.sent_values) {
    if (!without_gradient.count(value) && model.loss < 0) objectives.push_back(value);
  }
  return add_backward(model.graph, objectives, wrt, &origins);
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
  int x = family.embed(emit, config, model.tokens, model.positions);
  RouterSums router_sums;
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    const int first_node = g.num_nodes();
    const std::string prefix = layer_prefix(config, layer);
    x = family.block(emit, config, x, model.positions, prefix);
    add_layer_router_terms(emit, g, first_node, prefix, router_sums);
  }
  const int normed = family.final_norm(emit, config, x);
  building_head = true;
  model.logits = family.lm_head(emit, config, normed);
  model.loss = emit.op("cross_entropy", {model.logits, model.targets}, {}, "loss");
  add_router_losses(emit, config, batch * seq, router_sums, model);
  ValueLayouts layouts;
  GradientLabels gradient_labels;
  std::set<int> without_gradient;
  if (options.parallelize) {
    ParallelForward part = options.parallelize(model.graph);
    adopt(model, std::move(part.rewritten));
    model.received_values = std::move(part.received);
    model.sent_values = std::move(part.sent);
    model.received = model.received_values.empty() ? -1 : model.received_values.front();
    model.sent = model.sent_values.empty() ? -1 : model.sent_values.front();
    without_gradient = std::move(part.without_gradient);
    layouts = std::move(part.layouts);
    gradient_labels = std::move(part.gradient_labels);
  }
  if (training) {
    model.first_backward_node = g.num_nodes();
    GradientOrigins origins;
    model.grads = add_model_backward(model, without_gradient, origins);
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
  if (training && options.narrow_gradients) {
    std::set<int> gradients;
    for (auto [param, grad] : model.grads.of) {
      if (param != model.head_copy) gradients.insert(grad);
    }
    adopt(model, keep_gradients_narrow(model.graph, gradients));
  }
  if (training) {
    // Passes renumber nodes: the backward pass starts at the first node reading a seed.
    const std::vector<Node>& nodes = model.graph.nodes();
    const std::set<int> seeds(model.grads.seeds.begin(), model.grads.seeds.end());
    auto reads_seed = [&](const Node& node) {
      return std::any_of(node.inputs.begin(), node.inputs.end(), [&](int input) { return seeds.count(input) > 0; });
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
