#include "planner/qk_norm_work.h"

#include <string>

#include "core/error.h"

namespace strata {

namespace {

// The layer's norm over n_embd elements a row, made a norm over `width` (its traffic, weight included, and its
// arithmetic are per element of the row), on q or k: split by heads, not on the residual stream.
OpWork norm_of_width(const OpWork& norm, const std::string& label, double width, double n_embd) {
  OpWork op = norm;
  op.label = label;
  op.flops = norm.flops * width / n_embd;
  op.bytes = norm.bytes * width / n_embd;
  op.residual_stream = false;
  return op;
}

}  // namespace

void add_qk_norm(SegmentWork& layer, const ModelConfig& config, int tp) {
  const OpWork* forward = first_op_named(layer.forward, "rms_norm");
  const OpWork* backward = first_op_named(layer.backward, "rms_norm_backward");
  if (forward == nullptr || backward == nullptr) {
    fail("--qk-norm on prices OLMo 2's RMSNorm of q and k, but the {} family's layer has no RMSNorm", config.family);
  }
  const double n_embd = static_cast<double>(config.n_embd);
  const double head = static_cast<double>(config.head_size());
  const double ranks = static_cast<double>(tp);
  const double q_width = static_cast<double>(config.n_head) * head / ranks;
  const double k_width = static_cast<double>(config.kv_heads()) * head / ranks;
  const OpWork norm = *forward, gradient = *backward;
  layer.forward.push_back(norm_of_width(norm, "self_attn.q_norm", q_width, n_embd));
  layer.forward.push_back(norm_of_width(norm, "self_attn.k_norm", k_width, n_embd));
  layer.backward.push_back(norm_of_width(gradient, "self_attn.k_norm.grad_x", k_width, n_embd));
  layer.backward.push_back(norm_of_width(gradient, "self_attn.q_norm.grad_x", q_width, n_embd));
}

}  // namespace strata
