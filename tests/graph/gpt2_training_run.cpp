#include "gpt2_training_run.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "backends/backends.h"
#include "graph/executor.h"
#include "support/gpt2_shapes.h"

namespace strata::training_run {

namespace {

std::vector<std::byte> bytes_of(const Tensor& tensor) {
  std::vector<std::byte> bytes(tensor.nbytes());
  std::memcpy(bytes.data(), tensor.raw(), bytes.size());
  return bytes;
}

// Inputs of one step: parameters, tokens, targets, positions and the seed.
std::map<int, Tensor> step_inputs(const ModelGraph& model, const ModelConfig& config) {
  ParameterSet params(model_param_specs(config));
  params.initialise(CounterRng(11));
  std::map<int, Tensor> inputs;
  for (size_t i = 0; i < params.size(); ++i) inputs[model.params[i]] = params.tensor(i);
  const Shape& shape = model.graph.value(model.tokens).meta.shape;
  Tensor tokens = Tensor::empty(shape, DType::I32);
  Tensor targets = Tensor::empty(shape, DType::I32);
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    tokens.data<int32_t>()[i] = static_cast<int32_t>((7 * i + 3) % config.vocab_size);
    targets.data<int32_t>()[i] = static_cast<int32_t>((5 * i + 1) % config.vocab_size);
  }
  inputs[model.tokens] = tokens;
  inputs[model.targets] = targets;
  inputs[model.positions] = position_ids(shape[1]);
  Tensor seed = Tensor::empty({}, DType::F32);
  seed.data<float>()[0] = 0.5f;
  inputs[model.grads.seed] = seed;
  return inputs;
}

}  // namespace

ModelConfig three_layer_config() { return testing::gpt2_config(3, 2, 32, 37, 12); }

ModelGraph three_layer_training_graph() { return build_model_graph(three_layer_config(), 2, 12, /*training=*/true); }

int first_backward_node(const ModelGraph& model) {
  for (int id = 0; id < model.graph.num_nodes(); ++id) {
    const std::vector<int>& inputs = model.graph.node(id).inputs;
    if (std::find(inputs.begin(), inputs.end(), model.grads.seed) != inputs.end()) return id;
  }
  ADD_FAILURE() << "no node reads the loss seed";
  return model.graph.num_nodes();
}

std::set<int> kept_values(const ModelGraph& model) {
  std::set<int> kept{model.loss};
  for (const auto& [param, grad] : model.grads.of) kept.insert(grad);
  return kept;
}

StepBytes run_compiled(const ModelGraph& model, const Graph& graph, const GraphRewriter::Result& map,
                       const std::string& backend) {
  auto dispatcher = make_dispatcher(backend, FallbackPolicy::Allow);
  std::set<int> kept;
  for (int value : kept_values(model)) kept.insert(map(value));
  CompiledGraph compiled(graph, *dispatcher, kept);
  for (const auto& [value, tensor] : step_inputs(model, three_layer_config())) compiled.bind(map(value), tensor);
  compiled.run();
  StepBytes result{bytes_of(compiled.tensor(map(model.loss))), {}};
  for (int param : model.params) result.grads.push_back(bytes_of(compiled.tensor(map(model.grads.of.at(param)))));
  return result;
}

StepBytes run_unplanned(const ModelGraph& model, const std::string& backend) {
  auto dispatcher = make_dispatcher(backend, FallbackPolicy::Allow);
  std::map<int, Tensor> values = step_inputs(model, three_layer_config());
  for (const Node& node : model.graph.nodes()) {
    Tensors inputs;
    for (int input : node.inputs) inputs.push_back(values.at(input));
    Tensors outputs = dispatcher->call(node.op, inputs, node.attrs);
    for (size_t i = 0; i < outputs.size(); ++i) values[node.outputs[i]] = outputs[i];
  }
  StepBytes result{bytes_of(values.at(model.loss)), {}};
  for (int param : model.params) result.grads.push_back(bytes_of(values.at(model.grads.of.at(param))));
  return result;
}

}  // namespace strata::training_run
