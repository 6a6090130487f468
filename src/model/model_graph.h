#pragma once
// A model of any family (model/family.h) as a static graph: the forward pass
// (embedding, layers, final norm, LM head, mean cross-entropy) and, for
// training, its backward pass, with the parallel runtime's rewrites,
// recomputation and fusion applied.
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/autocast.h"
#include "graph/autodiff.h"
#include "graph/recompute.h"
#include "graph/graph.h"
#include "graph/rewrite.h"
#include "model/family.h"
#include "model/model_config.h"
#include "model/parameters.h"
#include "model/sharding_plan.h"
#include "model/value_layout.h"

namespace strata {

struct ModelGraph {
  Graph graph;
  int tokens = -1;     // input [B, T] i32
  int targets = -1;    // input [B, T] i32
  int positions = -1;  // input [T] i32, bound to 0..T-1
  int logits = -1;     // [B, T, V]
  int loss = -1;       // [] mean cross-entropy
  std::vector<int> params;  // value ids, in model_param_specs order (-1: not in this pipeline part)
  Gradients grads;          // filled when built for training
  int first_backward_node = -1;  // nodes before it are the forward pass (training graphs)
  // A pipeline part (-1 otherwise, and for what a part does not have: a first part receives
  // nothing, a last part sends nothing and has the loss, the others have no loss, tokens or
  // targets): the activation received from the previous part and the one sent to the next.
  // A training part's backward is seeded with the sent value's gradient (grads.seed) and makes
  // the received value's gradient (grads.of), to send back.
  int received = -1;
  int sent = -1;
  // Every value a pipeline part receives and sends, in transfer order: the activation (`received`,
  // `sent`) first, then what else crosses the boundary (a mixture of experts' running router sums,
  // model/moe/README.md). The training graph is seeded with the gradient of each sent value the
  // loss has one for (grads.seeds, in this order) and makes those of the received ones (grads.of).
  std::vector<int> received_values;
  std::vector<int> sent_values;
  // A pipeline part's stage-boundary nodes (parallel/pipeline_part.h; -1 where there is none):
  // the forward's receive of `received` and send of `sent`, and in training graphs the backward's
  // receive of the sent value's gradient and send of the received one's. The vectors hold every
  // transfer node of each kind (the activation's among them), in transfer order: a schedule's
  // action runs all of its kind, the peer stage's matching action the same values in the same order.
  struct BoundaryNodes {
    int receive = -1;
    int send = -1;
    int receive_gradient = -1;
    int send_gradient = -1;
    std::vector<int> receives, sends, receive_gradients, send_gradients;
  } boundary;
  // ModelBuildOptions::separate_head_copy: the LM head's own value of the tied embedding (-1
  // otherwise, in parts without the head, and in untied models), bound to the same tensor as the
  // embedding's.
  int head_copy = -1;
  // Under tensor parallelism: how this rank's values, forward and backward, stand to the whole
  // model's of the same name (empty otherwise: every value is whole).
  LayoutRecord layouts;
  // A mixture-of-experts model's router losses over all its MoE layers (-1 in dense models): balance
  // (transformers' load-balancing loss) and z (the router z-loss), unweighted [], the assignments
  // each expert was routed [E] and those it kept (fewer under a capacity: the difference is what was
  // dropped), summed over the layers; `loss` then adds router_aux_loss_coef balance + router_z_loss_coef z.
  struct RouterLosses {
    int balance = -1;
    int z = -1;
    int expert_tokens = -1;
    int expert_kept = -1;
  } router;
};

// A forward graph rewritten by the parallel runtime: tensor parallelism
// changes shapes; a pipeline part keeps some layers, receiving the values that
// enter them and sending those that leave (values it dropped map to -1 in
// `rewritten`).
struct ParallelForward {
  GraphRewriter::Result rewritten;
  // A pipeline part's stage boundaries, in transfer order, the activation first: the values it
  // receives (new inputs of the rewritten graph) and sends (send_to_stage's outputs).
  std::vector<int> received;
  std::vector<int> sent;
  std::set<int> without_gradient;  // of those: values the loss has no gradient for (nothing travels back)
  ValueLayouts layouts;  // tensor parallelism's, by value id of the rewritten graph
  GradientLabels gradient_labels;
};

struct ModelBuildOptions {
  DType dtype = DType::F32;    // params (master weights) and, without autocast, activations; f64 for checks
  PrecisionPolicy precision;   // which ops compute in bf16/fp16
  RecomputeMode recompute = RecomputeMode::None;  // training graphs: activations re-run in the backward pass
  bool fuse = false;           // residual+LayerNorm and element-wise chains become fused ops
  // Rewrites the forward graph before the backward pass is derived from it
  // (the parallel runtime's tensor-parallel and pipeline passes).
  std::function<ParallelForward(const Graph& forward)> parallelize;
  // The LM head reads the tied embedding through a param value of its own
  // (ModelGraph::head_copy, named head_copy_name()), so training graphs give the
  // two uses' gradients apart: accumulated over micro-batches separately and
  // added once, every layout (one process, or the first and last pipeline
  // stage) adds the same terms in the same order.
  bool separate_head_copy = false;
  // Training graphs: parameter gradients made in bf16 (or f16) stay in it, without the cast to f32
  // (graph/narrow_gradients.h): for a step that sums no gradients (one micro-batch on one rank).
  // The head copy's keeps its cast: it is added to the embedding's f32 gradient.
  bool narrow_gradients = false;
};

// The LM head's copy of the tied embedding: "<embedding>@lm_head".
std::string head_copy_name(const ModelConfig& config);

// The forward graph for micro-batches of `batch` rows of `seq` tokens, plus the
// backward graph when `training`.
ModelGraph build_model_graph(const ModelConfig& config, int64_t batch, int64_t seq, bool training,
                           const ModelBuildOptions& options);
inline ModelGraph build_model_graph(const ModelConfig& config, int64_t batch, int64_t seq, bool training,
                                  DType dtype = DType::F32) {
  return build_model_graph(config, batch, seq, training, ModelBuildOptions{.dtype = dtype});
}

// 0..seq-1 as an i32 tensor, for ModelGraph::positions.
Tensor position_ids(int64_t seq);

// The graph's casts of a parameter (or of the LM head's copy) to `dtype`: what a mixed-precision run can
// read from low-precision copies it keeps of its parameters instead of casting them every step.
struct ParameterCast {
  int param;  // the parameter's value
  int cast;   // the cast's output
};
std::vector<ParameterCast> parameter_casts(const ModelGraph& model, DType dtype);

}  // namespace strata
