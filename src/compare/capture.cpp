#include "compare/capture.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
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

// Names the first micro-batch's node outputs as the observer sees them; gives parameter gradients
// once every use's part of them is made (a tied embedding's two).
class GraphCapture {
 public:
  GraphCapture(const Trainer& trainer, const ModelConfig& model, const CaptureSink& sink) : sink_(sink) {
    const ModelGraph& graph = trainer.train_model();
    first_backward_ = graph.first_backward_node;
    const std::vector<ParamSpec> specs = model_param_specs(model);
    const std::string tied = model_family(model).tied_embedding(model);
    for (size_t i = 0; i < graph.params.size(); ++i) {
      const std::string& param = specs[i].name;
      std::vector<int> uses{graph.params[i]};
      if (param == tied && graph.head_copy >= 0) uses.push_back(graph.head_copy);
      for (int use : uses) {
        gradient_of_[graph.grads.of.at(use)] = param;
        ++pending_[param].parts;
      }
    }
    tokens_ = graph.tokens;
    targets_ = graph.targets;
  }

  void after_node(const CompiledGraph& compiled, int node_id, double seed, CapturedRun& run) {
    if (done_) return;
    const Graph& graph = compiled.graph();
    if (!run.tokens.defined()) {
      run.tokens = compiled.tensor(tokens_).clone();
      run.targets = compiled.tensor(targets_).clone();
    }
    const Node& node = graph.node(node_id);
    const bool backward = node_id >= first_backward_;
    std::vector<std::string> inputs;
    DType read = DType::F64;
    for (int input : node.inputs) {
      auto found = names_.find(input);
      inputs.push_back(found != names_.end() ? found->second : graph.value(input).name);
      read = narrower(read, precision_of(graph, input));
    }
    std::vector<CapturedTensor> gradients;  // parameters' whole gradients completed here, given after the outputs
    for (int output : node.outputs) {
      std::string name = node_output_name(graph.value(output).name, backward);
      if (const int seen = ++occurrences_[name]; seen > 1) name += fmt::format("#{}", seen);
      names_[output] = name;
      const DType dtype = graph.value(output).meta.dtype;
      precision_[output] = narrower(read, dtype);
      narrowest_ = narrower(narrowest_, precision_[output]);
      CapturedTensor captured{name,   node.op, dtype, precision_[output], compiled.tensor(output).clone(),
                              backward ? 1.0 / seed : 1.0, inputs};
      if (const auto gradient = gradient_of_.find(output); gradient != gradient_of_.end()) {
        add_gradient_part(gradient->second, captured, gradients);
      }
      sink_(std::move(captured));
    }
    for (CapturedTensor& gradient : gradients) sink_(std::move(gradient));
    if (node_id + 1 == graph.num_nodes()) done_ = true;
  }

  // The narrowest dtype the captured graph computed in: what steps' figures carry.
  DType narrowest() const { return narrowest_; }

 private:
  struct PendingGradient {
    int parts = 0;
    Tensor sum;  // f64, the seed divided out
    DType dtype = DType::F32;
    DType precision = DType::F64;
    std::vector<std::string> inputs;
  };

  DType precision_of(const Graph& graph, int value) const {
    auto found = precision_.find(value);
    return found != precision_.end() ? found->second : graph.value(value).meta.dtype;
  }

  void add_gradient_part(const std::string& param, const CapturedTensor& part, std::vector<CapturedTensor>& completed) {
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
      completed.push_back({param + ".grad", kParamGradOp, pending.dtype, pending.precision, pending.sum, 1.0, pending.inputs});
    }
  }

  const CaptureSink& sink_;
  int first_backward_ = 0;
  int tokens_ = -1, targets_ = -1;
  bool done_ = false;
  DType narrowest_ = DType::F64;
  std::map<int, std::string> names_;
  std::map<int, DType> precision_;
  std::map<std::string, int> occurrences_;
  std::map<int, std::string> gradient_of_;
  std::map<std::string, PendingGradient> pending_;
};

Tensor scalar(double value) {
  Tensor tensor = Tensor::empty({}, DType::F64);
  tensor.data<double>()[0] = value;
  return tensor;
}

}  // namespace

void capture_step_figures(int64_t step, double loss, double grad_norm, const ParameterSet& parameters,
                          DType precision, const CaptureSink& sink) {
  const std::string prefix = fmt::format("step{}.", step);
  sink({prefix + "loss", kStepLossOp, DType::F64, precision, scalar(loss), 1.0, {}});
  sink({prefix + "grad_norm", kStepGradNormOp, DType::F64, precision, scalar(grad_norm), 1.0, {}});
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Tensor& param = parameters.tensor(i);
    sink({prefix + parameters.spec(i).name, kStepParamOp, param.dtype(), precision, param.clone(), 1.0, {}});
  }
}

CapturedRun capture_run(const TrainConfig& config, const CaptureOptions& options, const CaptureSink& sink) {
  if (config.dp > 1 || config.tp > 1 || config.pp > 1) {
    fail("strata compare runs each side in one process: parallel.dp, parallel.tp and parallel.pp must be 1 (got {}, "
         "{}, {})",
         config.dp, config.tp, config.pp);
  }
  if (config.plan == "auto") fail("strata compare runs the configured layout: set parallel.plan = \"manual\"");
  Trainer trainer(config);
  CapturedRun run;
  if (options.initial_parameters) {
    for (size_t i = 0; i < trainer.params().size(); ++i) {
      run.initial_parameters.emplace_back(trainer.params().spec(i).name, trainer.params().tensor(i).clone());
    }
  }
  GraphCapture capture(trainer, config.model, sink);
  trainer.observe_nodes([&](const CompiledGraph& graph, int node) {
    capture.after_node(graph, node, trainer.backward_seed(), run);
  });
  const int64_t steps = std::max<int64_t>(options.steps, 1);
  for (int64_t step = 1; step <= steps; ++step) {
    const StepMetrics metrics = trainer.step();
    if (step == 1) trainer.observe_nodes({});
    if (options.steps == 0) break;
    capture_step_figures(step, metrics.loss, metrics.grad_norm, trainer.params(), capture.narrowest(), sink);
  }
  return run;
}

}  // namespace strata
