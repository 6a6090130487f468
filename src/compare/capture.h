#pragma once
// One side of `strata compare`: the trainer's own first step on a config (its
// initialisation, checkpoint or model.init_from, and its first batch), with
// every tensor of the first micro-batch's forward and backward graph copied
// out as its node makes it (before the memory plan reuses the bytes), under a
// name that survives graph passes; then, if asked, more steps' loss, gradient
// norm and parameters.
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/parameters.h"
#include "model/value_layout.h"
#include "train/trainer.h"
#include "train/config.h"

namespace strata {

// Pseudo op types of the tensors that no graph node makes (tolerance groups key on them too).
inline constexpr const char* kParamGradOp = "param_grad";    // a parameter's whole gradient
inline constexpr const char* kStepLossOp = "step_loss";      // a step's mean loss
inline constexpr const char* kStepGradNormOp = "step_grad_norm";
inline constexpr const char* kStepParamOp = "step_param";    // a parameter after a step

struct CapturedTensor {
  // "<node label>.<forward|backward>.<output>" (the output as the op's schema names it: y, out,
  // dx, ...; a fused op's outputs keep the names of the values they stand for; a name met again,
  // as recomputation's clones are, gets "#2", "#3"), "<parameter>.grad", "step<N>.loss",
  // "step<N>.grad_norm", "step<N>.<parameter>".
  std::string name;
  std::string op;  // the node's op type, or one of the pseudo op types above
  DType dtype = DType::F32;  // as the run stored it
  // The narrowest floating dtype on its way: its own and that of everything it was computed from (an
  // f32 LayerNorm of bf16 matmuls' outputs carries bf16 error). Tolerances key on it.
  DType precision = DType::F32;
  Tensor tensor;   // a copy (a parameter gradient: f64, the seed divided out)
  double factor = 1;  // multiplies the tensor before comparing: the backward pass's seed is divided out
  std::vector<std::string> inputs;  // what its op read: captured names, or graph inputs' and params' own
  // The op's attributes and which of its outputs this is: what re-running the op alone needs (truth.h).
  Attrs attrs;
  int output = 0;
  // Under tensor parallelism: how this rank's tensor stands to the whole model's (whole otherwise).
  ValueLayout layout;
  // A parameter after a step: the most AdamW can have moved any of its elements since the comparison's start
  // (the steps' learning rates times adamw_step_reach), so the most two correct runs can differ by is the sum
  // of both sides'.
  double update_reach = 0;
};
using CaptureSink = std::function<void(CapturedTensor&&)>;
// A graph input or parameter a node read (no node made it): its value name and a copy.
using GraphInputSink = std::function<void(const std::string& name, const Tensor& value)>;

struct CapturedRun {
  Tensor tokens, targets;  // the first micro-batch
  // With CaptureOptions::initial_parameters: by name, before the first step.
  std::vector<std::pair<std::string, Tensor>> initial_parameters;
};

struct CaptureOptions {
  int64_t steps = 0;  // 0: the first step's graph only; N: also N steps' loss, gradient norm and parameters
  bool initial_parameters = false;
  GraphInputSink graph_inputs;  // set: given every graph input and parameter the captured graph reads
};

// Names and copies a model part's tensors as the trainer's node observer sees them, giving each
// parameter's gradient once every use of it in the part has made its term (a tied embedding's two).
// Under tensor parallelism only the values the record lays out are given (with their layout): the
// pass's own collectives stand for no value of the whole model.
class GraphCapture {
 public:
  GraphCapture(const ModelGraph& model, const ModelConfig& config, CaptureSink sink);
  void after_node(const Trainer::ObservedNode& observed, double seed);
  // Also gives each graph input and parameter the first time a node reads it (inputs and parameters are
  // bound from outside the memory plan, so nothing has overwritten them).
  void keep_graph_inputs(GraphInputSink sink) { input_sink_ = std::move(sink); }
  // The narrowest dtype the captured graph computed in: what steps' figures carry.
  DType narrowest() const { return narrowest_; }

 private:
  struct PendingGradient {
    int parts = 0;
    Tensor sum;  // f64, the seed divided out
    DType dtype = DType::F32;
    DType precision = DType::F64;
    std::vector<std::string> inputs;
    std::string use;  // the name of a param value standing for it here (its layout is the gradient's)
  };
  DType precision_of(const Graph& graph, int value) const;
  void add_gradient_part(const std::string& param, const CapturedTensor& part, std::vector<CapturedTensor>& completed);
  // The name the whole model's graph gives a value (the record's gradient labels).
  std::string whole_model_name(const std::string& value_name) const;
  // Whether and how the value named `name` of `shape` is given (the whole model's values only).
  bool laid_out(const std::string& name, const Shape& shape, ValueLayout& layout) const;

  CaptureSink sink_;
  GraphInputSink input_sink_;
  std::set<int> inputs_given_;
  int first_backward_ = 0;
  const LayoutRecord* record_;
  DType narrowest_ = DType::F64;
  std::map<int, std::string> names_;
  std::map<int, DType> precision_;
  std::map<std::string, int> occurrences_;
  std::map<int, std::string> gradient_of_;
  std::map<std::string, PendingGradient> pending_;
};

// "step<step>.loss", "step<step>.grad_norm" and "step<step>.<parameter>" for every parameter, judged
// in `precision` (the narrowest dtype the step computed in); `update_reach`: the run's AdamwReach so far.
void capture_step_figures(int64_t step, double loss, double grad_norm, const ParameterSet& parameters,
                          DType precision, double update_reach, const CaptureSink& sink);

// Runs in this process (parallel.tp = parallel.pp = 1 and one rank), writing nothing: no checkpoint
// and no metrics.
CapturedRun capture_run(const TrainConfig& config, const CaptureOptions& options, const CaptureSink& sink);

}  // namespace strata
