#include "graph/grad_rules.h"

#include <map>

#include "ops/collective_group.h"

namespace strata {

namespace {

std::string grad_label(const Node& node, const std::string& what) {
  return (node.label.empty() ? node.op : node.label) + ".grad_" + what;
}

// Gradient of a broadcast operand: sum over the dims it was broadcast along.
int reduce_to_shape(Graph& graph, int grad, const Shape& shape, const std::string& label) {
  if (graph.value(grad).meta.shape == shape) return grad;
  return graph.apply1("sum_to", {grad}, {{"shape", shape}}, label);
}

// The vocabulary-shard attrs of an embedding or cross_entropy node (ops/vocab_shard.h), if any.
Attrs vocab_attrs(const Node& node) {
  Attrs attrs;
  for (const char* name : {"vocab_start", "vocab_size"}) {
    if (node.attrs.has(name)) attrs.set(name, node.attrs.get_int(name));
  }
  return attrs;
}

// A stage transfer's attrs with the flow the other way (activations <-> gradients).
Attrs reversed_flow(const Node& node) {
  Attrs attrs = node.attrs;
  const bool forward = parse_stage_flow(node.op, node.attrs) == StageFlow::Activations;
  attrs.set("flow", std::string(stage_flow_name(forward ? StageFlow::Gradients : StageFlow::Activations)));
  return attrs;
}

std::vector<int> only_primary(const Node& node, const std::vector<int>& output_grads) {
  for (size_t i = 1; i < output_grads.size(); ++i) {
    STRATA_CHECK(output_grads[i] == kNoGradient, "op '{}' output {} is not differentiable", node.op, i);
  }
  return {};
}

const std::map<std::string, GradRule>& rules() {
  static const std::map<std::string, GradRule> table = {
      {"embedding",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         int64_t rows = g.value(n.inputs[0]).meta.shape[0];
         Attrs attrs = vocab_attrs(n);
         attrs.set("num_embeddings", rows);
         int dweight = g.apply1("embedding_backward", {dy[0], n.inputs[1]}, attrs, grad_label(n, "weight"));
         return {dweight, kNoGradient};
       }},
      {"add",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return {dy[0], reduce_to_shape(g, dy[0], g.value(n.inputs[1]).meta.shape, grad_label(n, "b"))};
       }},
      // Megatron's conjugate pair: each one's gradient is the other's forward.
      {"all_reduce",
       [](Graph&, const Node&, const std::vector<int>& dy) -> std::vector<int> { return {dy[0]}; }},
      {"copy_to_group",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return {g.apply1("all_reduce", {dy[0]}, n.attrs, grad_label(n, "x"))};
       }},
      {"all_gather",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return {g.apply1("reduce_scatter", {dy[0]}, n.attrs, grad_label(n, "x"))};
       }},
      {"split_to_group",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return {g.apply1("all_gather", {dy[0]}, n.attrs, grad_label(n, "x"))};
       }},
      {"gather_to_group",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return {g.apply1("split_to_group", {dy[0]}, n.attrs, grad_label(n, "x"))};
       }},
      {"reduce_scatter",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return {g.apply1("all_gather", {dy[0]}, n.attrs, grad_label(n, "x"))};
       }},
      // The exchange is a permutation that is its own transpose: the gradient goes back the same way.
      {"all_to_all",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return {g.apply1("all_to_all", {dy[0]}, n.attrs, grad_label(n, "x"))};
       }},
      // A stage boundary: the gradient goes back to the same stage on the other flow.
      {"send_to_stage",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return {g.apply1("receive_from_stage", {dy[0]}, reversed_flow(n), grad_label(n, "x"))};
       }},
      {"receive_from_stage",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return {g.apply1("send_to_stage", {dy[0]}, reversed_flow(n), grad_label(n, "x"))};
       }},
      {"scale",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return {g.apply1("scale", {dy[0]}, n.attrs, grad_label(n, "x"))};
       }},
      {"cast",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         std::string dtype(dtype_name(g.value(n.inputs[0]).meta.dtype));
         return {g.apply1("cast", {dy[0]}, {{"dtype", dtype}}, grad_label(n, "x"))};
       }},
      {"gelu",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return {g.apply1("gelu_backward", {dy[0], n.inputs[0]}, {}, grad_label(n, "x"))};
       }},
      {"layernorm",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         only_primary(n, dy);
         return g.apply("layernorm_backward", {dy[0], n.inputs[0], n.inputs[1], n.outputs[1], n.outputs[2]}, {},
                        grad_label(n, "x"));
       }},
      {"rms_norm",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return g.apply("rms_norm_backward", {dy[0], n.inputs[0], n.inputs[1]}, n.attrs, grad_label(n, "x"));
       }},
      // A rotation's gradient is its transpose: the rotation by the negated angle.
      {"rope",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         Attrs attrs = n.attrs;
         attrs.set("inverse", !n.attrs.get_bool("inverse"));
         return {g.apply1("rope", {dy[0], n.inputs[1]}, attrs, grad_label(n, "x")), kNoGradient};
       }},
      {"swiglu",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return g.apply("swiglu_backward", {dy[0], n.inputs[0], n.inputs[1]}, {}, grad_label(n, "gate"));
       }},
      {"matmul",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         STRATA_CHECK(!n.attrs.get_bool("trans_a"), "gradient of a trans_a matmul is not needed by any model");
         bool trans_b = n.attrs.get_bool("trans_b");
         // y = a b      : da = dy b^T, db = a^T dy
         // y = a b^T    : da = dy b,   db = dy^T a
         int da = g.apply1("matmul", {dy[0], n.inputs[1]}, {{"trans_a", false}, {"trans_b", !trans_b}},
                           grad_label(n, "a"));
         int db = trans_b ? g.apply1("matmul", {dy[0], n.inputs[0]}, {{"trans_a", true}, {"trans_b", false}},
                                     grad_label(n, "b"))
                          : g.apply1("matmul", {n.inputs[0], dy[0]}, {{"trans_a", true}, {"trans_b", false}},
                                     grad_label(n, "b"));
         return {da, db};
       }},
      {"linear",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         int dx = g.apply1("matmul", {dy[0], n.inputs[1]}, {{"trans_a", false}, {"trans_b", true}}, grad_label(n, "x"));
         int dw = g.apply1("matmul", {n.inputs[0], dy[0]}, {{"trans_a", true}, {"trans_b", false}}, grad_label(n, "w"));
         int db = reduce_to_shape(g, dy[0], g.value(n.inputs[2]).meta.shape, grad_label(n, "bias"));
         return {dx, dw, db};
       }},
      {"attention",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         only_primary(n, dy);
         return {g.apply1("attention_backward", {dy[0], n.inputs[0], n.outputs[0], n.outputs[1]}, n.attrs,
                          grad_label(n, "qkv"))};
       }},
      {"grouped_attention",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         only_primary(n, dy);
         return g.apply("grouped_attention_backward",
                        {dy[0], n.inputs[0], n.inputs[1], n.inputs[2], n.outputs[0], n.outputs[1]}, n.attrs,
                        grad_label(n, "qkv"));
       }},
      {"reshape",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         const Shape& shape = g.value(n.inputs[0]).meta.shape;
         return {g.apply1("reshape", {dy[0]}, {{"keep", int64_t{0}}, {"tail", shape}}, grad_label(n, "x"))};
       }},
      // Mixture of experts (ops/moe_ops.cpp): only the router's weights carry a gradient; the experts it
      // chose, the dispatch plan and the counts are discrete.
      {"moe_route",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         only_primary(n, dy);
         return {g.apply1("moe_route_backward", {dy[0], n.inputs[0], n.outputs[1]}, n.attrs, grad_label(n, "logits"))};
       }},
      {"moe_router_loss_terms",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         STRATA_CHECK(dy[0] != kNoGradient && dy[1] != kNoGradient,
                      "op 'moe_router_loss_terms' ({}): both prob_sum and z_sum must reach the loss (moe_aux_loss)",
                      n.label);
         return {g.apply1("moe_router_loss_terms_backward", {dy[0], dy[1], n.inputs[0]}, {}, grad_label(n, "logits"))};
       }},
      {"moe_aux_loss",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         only_primary(n, dy);
         std::vector<int> grads = g.apply("moe_aux_loss_backward", {dy[0], n.inputs[2]}, n.attrs, grad_label(n, "terms"));
         return {grads[0], grads[1], kNoGradient};
       }},
      {"moe_permute",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return {g.apply1("moe_permute_backward", {dy[0], n.inputs[1]}, {}, grad_label(n, "x")), kNoGradient};
       }},
      // The exchanges are a permutation of rows and its inverse: each is the other's gradient.
      {"moe_dispatch_exchange",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         only_primary(n, dy);
         return {g.apply1("moe_return_exchange", {dy[0], n.inputs[1], n.outputs[2]}, n.attrs, grad_label(n, "xs")),
                 kNoGradient};
       }},
      {"moe_return_exchange",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         const int dye = g.apply("moe_dispatch_exchange", {dy[0], n.inputs[1]}, n.attrs, grad_label(n, "ye"))[0];
         return {dye, kNoGradient, kNoGradient};
       }},
      {"moe_combine",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         std::vector<int> grads = g.apply("moe_combine_backward", {dy[0], n.inputs[0], n.inputs[1], n.inputs[2]}, {},
                                          grad_label(n, "ys"));
         return {grads[0], grads[1], kNoGradient};
       }},
      // y_e = x_e w_e^T: dx_e = dy_e w_e, dw_e = dy_e^T x_e; y_e = x_e w_e: dx_e = dy_e w_e^T, dw_e = x_e^T dy_e.
      {"grouped_matmul",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         const bool trans_b = n.attrs.get_bool("trans_b");
         const int x = n.inputs[0], w = n.inputs[1], sizes = n.inputs[2];
         int dx = g.apply1("grouped_matmul", {dy[0], w, sizes}, {{"trans_b", !trans_b}}, grad_label(n, "x"));
         std::vector<int> operands = trans_b ? std::vector<int>{dy[0], x} : std::vector<int>{x, dy[0]};
         int dw = g.apply1("grouped_matmul_weight_grad", {operands[0], operands[1], sizes}, {}, grad_label(n, "w"));
         return {dx, dw, kNoGradient};
       }},
      {"sigmoid_gate",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         return g.apply("sigmoid_gate_backward", {dy[0], n.inputs[0], n.inputs[1]}, {}, grad_label(n, "x"));
       }},
      {"cross_entropy",
       [](Graph& g, const Node& n, const std::vector<int>& dy) -> std::vector<int> {
         only_primary(n, dy);
         // A vocabulary shard's gradient needs only the forward's whole-vocabulary lse: no communication.
         int dlogits = g.apply1("cross_entropy_backward", {dy[0], n.inputs[0], n.inputs[1], n.outputs[1]},
                                vocab_attrs(n), grad_label(n, "logits"));
         return {dlogits, kNoGradient};
       }},
  };
  return table;
}

}  // namespace

const GradRule& grad_rule(const std::string& op) {
  auto found = rules().find(op);
  if (found == rules().end()) fail("op '{}' has no gradient rule", op);
  return found->second;
}

std::vector<std::string> ops_with_grad_rules() {
  std::vector<std::string> ops;
  for (const auto& [op, rule] : rules()) ops.push_back(op);
  return ops;
}

}  // namespace strata
