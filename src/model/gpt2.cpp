#include "model/gpt2.h"

#include <algorithm>
#include <cmath>

#include "graph/fusion.h"
#include "model/gpt2_block.h"
#include "model/graph_emitter.h"

namespace strata {

namespace {

// Points the model's handles into a rewritten graph (-1 for values it dropped).
void adopt(GPT2Graph& model, GraphRewriter::Result rewritten) {
  auto remap = [&](int& id) {
    if (id >= 0) id = rewritten.value_map.at(static_cast<size_t>(id));
  };
  for (int* id : {&model.tokens, &model.targets, &model.positions, &model.logits, &model.loss, &model.grads.seed,
                  &model.received, &model.sent, &model.head_copy}) {
    remap(*id);
  }
  for (int& id : model.params) remap(id);
  std::map<int, int> grads;
  for (auto [param, grad] : model.grads.of) grads[rewritten(param)] = rewritten(grad);
  model.grads.of = std::move(grads);
  model.graph = std::move(rewritten.graph);
}

// Finds the stage-boundary nodes of a pipeline part by what they read and make.
GPT2Graph::BoundaryNodes boundary_nodes(const GPT2Graph& model) {
  GPT2Graph::BoundaryNodes found;
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

std::set<int> read_after_run(const GPT2Graph& model) {
  std::set<int> kept;
  for (int id : {model.loss, model.logits, model.sent}) {
    if (id >= 0) kept.insert(id);
  }
  for (auto [value, grad] : model.grads.of) kept.insert(grad);
  return kept;
}

}  // namespace

std::vector<ParamSpec> gpt2_param_specs(const GPT2Config& config) {
  const int64_t c = config.n_embd;
  const float stddev = 0.02f;
  const float residual_stddev = stddev / std::sqrt(2.0f * static_cast<float>(config.n_layer));
  std::vector<ParamSpec> specs;
  auto weight = [&](const std::string& name, Shape shape, float sd) {
    specs.push_back({name, std::move(shape), Init::Normal, sd, true});
  };
  auto bias = [&](const std::string& name, int64_t size) { specs.push_back({name, {size}, Init::Zeros, 0, false}); };
  auto norm = [&](const std::string& name) {
    specs.push_back({name + ".weight", {c}, Init::Ones, 0, false});
    bias(name + ".bias", c);
  };
  weight("transformer.wte.weight", {config.vocab_size, c}, stddev);
  weight("transformer.wpe.weight", {config.block_size, c}, stddev);
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    std::string p = gpt2_layer_prefix(layer);
    norm(p + "ln_1");
    weight(p + "attn.c_attn.weight", {c, 3 * c}, stddev);
    bias(p + "attn.c_attn.bias", 3 * c);
    weight(p + "attn.c_proj.weight", {c, c}, residual_stddev);
    bias(p + "attn.c_proj.bias", c);
    norm(p + "ln_2");
    weight(p + "mlp.c_fc.weight", {c, 4 * c}, stddev);
    bias(p + "mlp.c_fc.bias", 4 * c);
    weight(p + "mlp.c_proj.weight", {4 * c, c}, residual_stddev);
    bias(p + "mlp.c_proj.bias", c);
  }
  norm("transformer.ln_f");
  return specs;
}

ShardingPlan gpt2_sharding_plan() {
  return {{
      {"transformer.h.*.attn.c_attn.*", ShardStyle::ColumnParallel, 3},
      {"transformer.h.*.mlp.c_fc.*", ShardStyle::ColumnParallel, 1},
      {"transformer.h.*.c_proj.weight", ShardStyle::RowParallel, 1},
      {"transformer.wte.weight*", ShardStyle::VocabParallel, 1},  // and the LM head's copy
  }};
}

GPT2Graph build_gpt2_graph(const GPT2Config& config, int64_t batch, int64_t seq, bool training,
                           const GPT2BuildOptions& options) {
  config.validate();
  if (seq > config.block_size) fail("sequence length {} exceeds model.block_size {}", seq, config.block_size);
  GPT2Graph model;
  Graph& g = model.graph;
  std::map<std::string, int> param;
  for (const ParamSpec& spec : gpt2_param_specs(config)) {
    int id = g.add_param(spec.name, {spec.shape, options.dtype});
    param[spec.name] = id;
    model.params.push_back(id);
  }
  model.tokens = g.add_input("tokens", {{batch, seq}, DType::I32});
  model.targets = g.add_input("targets", {{batch, seq}, DType::I32});
  model.positions = g.add_input("positions", {{seq}, DType::I32});
  if (options.separate_head_copy) {
    model.head_copy = g.add_param(kGPT2HeadCopy, g.value(param.at("transformer.wte.weight")).meta);
  }
  bool building_head = false;
  GraphEmitter emit(g, options.precision, [&](const std::string& name, const Shape& shape) {
    int id = building_head && model.head_copy >= 0 && name == "transformer.wte.weight" ? model.head_copy : param.at(name);
    STRATA_CHECK(g.value(id).meta.shape == shape, "GPT-2 parameter {} built as {}, used as {}", name,
                 shape_str(g.value(id).meta.shape), shape_str(shape));
    return id;
  });
  int x = gpt2_embed(emit, config, model.tokens, model.positions);
  for (int64_t layer = 0; layer < config.n_layer; ++layer) x = gpt2_block(emit, config, x, gpt2_layer_prefix(layer));
  const int normed = gpt2_final_norm(emit, config, x);
  building_head = true;
  model.logits = gpt2_lm_head(emit, config, normed);
  model.loss = emit.op("cross_entropy", {model.logits, model.targets}, {}, "loss");
  if (options.parallelize) {
    ParallelForward part = options.parallelize(model.graph);
    adopt(model, std::move(part.rewritten));
    model.received = part.received;
    model.sent = part.sent;
  }
  if (training) {
    model.first_backward_node = g.num_nodes();
    std::vector<int> wrt;
    for (int param : model.params) {
      if (param >= 0) wrt.push_back(param);
    }
    if (model.head_copy >= 0) wrt.push_back(model.head_copy);
    if (model.received >= 0) wrt.push_back(model.received);
    model.grads = add_backward(g, model.loss >= 0 ? model.loss : model.sent, wrt);
    if (options.recompute != RecomputeMode::None) {
      adopt(model, recompute_activations(model.graph, model.first_backward_node, options.recompute,
                                         segment_by_label_prefix(kGPT2LayerPrefix)));
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

Tensor position_ids(int64_t seq) {
  Tensor ids = Tensor::empty({seq}, DType::I32);
  for (int64_t i = 0; i < seq; ++i) ids.data<int32_t>()[i] = static_cast<int32_t>(i);
  return ids;
}

}  // namespace strata
