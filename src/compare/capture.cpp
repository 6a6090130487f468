#include "compare/capture.h"

#include <algorithm>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "compare/adamw_reach.h"
#include "core/error.h"
#include "model/family.h"
#include "parallel/parallel_dimension.h"
#include "train/trainer.h"

namespace strata {

namespace {

// "label:output" becomes "label.forward.output" (or backward); a label made from another value's
// name ("embed:out.grad_sum") reads "embed.out.grad_sum".
std::string node_output_name(const std::string& value_name, bool backward) {
  const size_t colon = value_name.rfind(':');
  const std::string direction = backward ? ".backward." : ".forward.";
  std::string label = value_name.substr(0, colon), output = colon == std::string::npos ? "out" : value_name.substr(colon + 1);
  std::replace(label.begin(), label.end(), ':', '.');
  return label + direction + output;
}

// Of two dtypes, the one with fewer mantissa bits; integers (token ids) carry no rounding.
DType narrower(DType a, DType b) {
  auto rank = [](DType dtype) { return dtype == DType::BF16 ? 0 : dtype == DType::F16 ? 1 : dtype == DType::F32 ? 2 : 3; };
  if (!is_floating(b)) return a;
  if (!is_floating(a)) return b;
  return rank(a) <= rank(b) ? a : b;
}

Tensor scalar(double value) {
  Tensor tensor = Tensor::empty({}, DType::F64);
  tensor.data<double>()[0] = value;
  return tensor;
}

}  // namespace

GraphCapture::GraphCapture(const ModelGraph& model, const ModelConfig& config, CaptureSink sink)
    : sink_(std::move(sink)), first_backward_(model.first_backward_node), record_(&model.layouts) {
  const std::vector<ParamSpec> specs = model_param_specs(config);
  const std::string tied = model_family(config).tied_embedding(config);
  for (size_t i = 0; i < model.params.size(); ++i) {
    const std::string& param = specs[i].name;
    std::vector<int> uses;
    if (model.params[i] >= 0) uses.push_back(model.params[i]);
    if (param == tied && model.head_copy >= 0) uses.push_back(model.head_copy);
    for (int use : uses) {
      gradient_of_[model.grads.of.at(use)] = param;
      ++pending_[param].parts;
      pending_[param].use = model.graph.value(use).name;  // the head's copy, in a part without the embedding
    }
  }
}

std::string GraphCapture::whole_model_name(const std::string& value_name) const {
  const size_t colon = value_name.rfind(':');
  if (colon == std::string::npos) return value_name;
  auto found = record_->gradient_labels.find(value_name.substr(0, colon));
  return found == record_->gradient_labels.end() ? value_name : found->second + value_name.substr(colon);
}

bool GraphCapture::laid_out(const std::string& name, const Shape& shape, ValueLayout& layout) const {
  if (record_->empty()) {
    layout = ValueLayout{};
    layout.shape = shape;
    return true;
  }
  auto found = record_->values.find(name);
  if (found == record_->values.end() || found->second.shape != shape) return false;
  layout = found->second;
  return true;
}

void GraphCapture::after_node(const Trainer::ObservedNode& observed, double seed) {
  const Graph& graph = observed.model.graph;
  const Node& node = graph.node(observed.node);
  const bool backward = observed.node >= first_backward_;
  std::vector<std::string> inputs;
  DType read = DType::F64;
  for (int input : node.inputs) {
    auto found = names_.find(input);
    if (found == names_.end() && input_sink_ && inputs_given_.insert(input).second) {
      input_sink_(graph.value(input).name, observed.graph.tensor(observed.slot, input).host_copy());
    }
    inputs.push_back(found != names_.end() ? found->second : graph.value(input).name);
    read = narrower(read, precision_of(graph, input));
  }
  std::vector<CapturedTensor> gradients;  // parameters' whole gradients completed here, given after the outputs
  for (size_t index = 0; index < node.outputs.size(); ++index) {
    const int output = node.outputs[index];
    const Value& value = graph.value(output);
    std::string name = node_output_name(whole_model_name(value.name), backward);
    if (const int seen = ++occurrences_[name]; seen > 1) name += fmt::format("#{}", seen);
    names_[output] = name;
    precision_[output] = narrower(read, value.meta.dtype);
    narrowest_ = narrower(narrowest_, precision_[output]);
    CapturedTensor captured{name, node.op, value.meta.dtype, precision_[output], Tensor(), backward ? 1.0 / seed : 1.0,
                            inputs, node.attrs, static_cast<int>(index)};
    const auto gradient = gradient_of_.find(output);
    const bool given = laid_out(value.name, value.meta.shape, captured.layout);
    if (!given && gradient == gradient_of_.end()) continue;
    captured.tensor = observed.graph.tensor(observed.slot, output).host_copy();
    if (gradient != gradient_of_.end()) add_gradient_part(gradient->second, captured, gradients);
    if (given) sink_(std::move(captured));
  }
  for (CapturedTensor& gradient : gradients) sink_(std::move(gradient));
}

DType GraphCapture::precision_of(const Graph& graph, int value) const {
  auto found = precision_.find(value);
  return found != precision_.end() ? found->second : graph.value(value).meta.dtype;
}

void GraphCapture::add_gradient_part(const std::string& param, const CapturedTensor& part,
                                     std::vector<CapturedTensor>& completed) {
  PendingGradient& pending = pending_.at(param);
  Tensor wide = part.tensor.to(DType::F64);
  double* values = wide.data<double>();
  for (int64_t i = 0; i < wide.numel(); ++i) values[i] *= part.factor;
  if (pending.sum.defined()) {
    double* sum = pending.sum.data<double>();
    for (int64_t i = 0; i < wide.numel(); ++i) sum[i] += values[i];
  } else {
    pending.sum = wide;
    pending.dtype = part.dtype;
  }
  pending.inputs.push_back(part.name);
  pending.precision = narrower(pending.precision, part.precision);
  if (--pending.parts == 0) {
    CapturedTensor whole{param + ".grad", kParamGradOp, pending.dtype, pending.precision, pending.sum, 1.0, pending.inputs};
    if (!record_->empty()) whole.layout = record_->values.at(pending.use);
    whole.layout.shape = whole.tensor.shape();
    // A parameter split over ranks that run other micro-batches (experts under expert parallelism) has
    // their tokens' gradients too: not this micro-batch's. The steps' parameters compare it.
    if (!whole.layout.group.empty() && parallel_dimension(whole.layout.group).splits_batch) return;
    completed.push_back(std::move(whole));
  }
}

void capture_step_figures(int64_t step, double loss, double grad_norm, const ParameterSet& parameters,
                          DType precision, double update_reach, const CaptureSink& sink) {
  const std::string prefix = fmt::format("step{}.", step);
  sink({prefix + "loss", kStepLossOp, DType::F64, precision, scalar(loss), 1.0, {}});
  sink({prefix + "grad_norm", kStepGradNormOp, DType::F64, precision, scalar(grad_norm), 1.0, {}});
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Tensor& param = parameters.tensor(i);
    CapturedTensor captured{prefix + parameters.spec(i).name, kStepParamOp, param.dtype(), precision, param.host_copy(),
                            1.0, {}};
    captured.update_reach = update_reach;
    sink(std::move(captured));
  }
}

CapturedRun capture_run(const TrainConfig& config, const CaptureOptions& options, const CaptureSink& sink) {
  if (const MeshShape mesh = config.mesh(); mesh.size() > 1) {
    fail("strata compare runs each side in one process: {} must all be 1", mesh.keys());
  }
  if (config.plan == "auto") fail("strata compare runs the configured layout: set parallel.plan = \"manual\"");
  Trainer trainer(config);
  CapturedRun run;
  if (options.initial_parameters) {
    for (size_t i = 0; i < trainer.params().size(); ++i) {
      run.initial_parameters.emplace_back(trainer.params().spec(i).name, trainer.params().tensor(i).host_copy());
    }
  }
  std::optional<GraphCapture> capture;  // of the one model part, once the trainer shows it
  auto observe = [&](const Trainer::ObservedNode& observed) {
    if (!capture) {
      capture.emplace(observed.model, config.model, sink);
      if (options.graph_inputs) capture->keep_graph_inputs(options.graph_inputs);
      run.tokens = observed.graph.tensor(observed.model.tokens).host_copy();
      run.targets = observed.graph.tensor(observed.model.targets).host_copy();
    }
    capture->after_node(observed, trainer.backward_seed());
  };
  trainer.observe_first_micro_batch(observe);
  const int64_t steps = std::max<int64_t>(options.steps, 1);
  AdamwReach reach(config.beta1, config.beta2);
  for (int64_t step = 1; step <= steps; ++step) {
    const StepMetrics metrics = trainer.step();
    if (options.steps == 0) break;
    reach.add_step(metrics.step, metrics.lr);
    capture_step_figures(step, metrics.loss, metrics.grad_norm, trainer.params(), capture->narrowest(), reach.total(),
                         sink);
  }
  return run;
}

}  // namespace strata
