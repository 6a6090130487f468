#pragma once
// The mixture-of-experts ops' shared pieces: the router's attrs, read once for the schemas and every
// backend's kernels.
#include <cstdint>
#include <string>

#include "ops/schema.h"

namespace strata {

enum class MoeScoring { Softmax, Sigmoid };

// moe_route's attrs: top_k (1..E), scoring ("softmax" | "sigmoid"), norm_topk_prob, capacity_factor (0 for
// dropless).
struct MoeRouting {
  int64_t top_k = 1;
  MoeScoring scoring = MoeScoring::Softmax;
  bool norm_topk_prob = false;
  double capacity_factor = 0;
  // Rows kept per expert for `tokens` tokens: ceil(capacity_factor * tokens * top_k / experts), 0 for
  // no limit (dropless).
  int64_t capacity(int64_t tokens, int64_t experts) const;
};

// Reads and checks the attrs of `op` for `experts` experts; errors name the op and the attr.
MoeRouting moe_routing(const std::string& op, const Attrs& attrs, int64_t experts);

// moe_route, moe_router_loss_terms, moe_aux_loss, moe_permute, moe_combine, sigmoid_gate and their
// backwards (moe_ops.cpp); grouped_matmul and grouped_matmul_weight_grad (grouped_matmul_ops.cpp).
void add_moe_ops(OpRegistry& registry);
void add_grouped_matmul_ops(OpRegistry& registry);

}  // namespace strata
