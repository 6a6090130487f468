#pragma once
// The cpu kernels, one registration function per family of ops. Each family
// registers f32 and, where training in bf16 needs it, bf16.
#include "ops/backend.h"

namespace strata::cpu {

// Rows of a tensor whose leading dims are merged (its last dim is the row).
inline int64_t leading_rows(const Tensor& tensor) {
  return shape_numel(Shape(tensor.shape().begin(), tensor.shape().end() - 1));
}

void register_elementwise(Backend& backend);     // add, scale, gelu, gelu_backward
void register_reductions(Backend& backend);      // sum_to, sum_squares
void register_square_sum_exact(Backend& backend);
void register_adamw(Backend& backend);
void register_embedding(Backend& backend);       // embedding, embedding_backward
void register_layernorm(Backend& backend);       // layernorm, layernorm_backward
// rms_norm(_backward), add_rms_norm, rms_norm_backward_add
void register_rms_norm(Backend& backend);
void register_rope(Backend& backend);
void register_swiglu(Backend& backend);          // swiglu, swiglu_backward
void register_matmul(Backend& backend);          // matmul, linear
void register_attention(Backend& backend);       // (grouped_)attention(_backward), attention_cached
void register_cross_entropy(Backend& backend);   // cross_entropy, cross_entropy_backward
void register_cast(Backend& backend);            // cast between f32, bf16, f16 (and to f64)
// bf16 and f16 kernels, computing in f32, for every op with an f32 kernel
// registered before and no kernel of that dtype: call it last.
void register_through_f32(Backend& backend);
void register_attention_parts(Backend& backend);  // split_heads, merge_heads, bmm, causal_softmax(_backward)
void register_fused(Backend& backend);           // add_layernorm, layernorm_backward_add, fused_elementwise1..4
void register_moe_router(Backend& backend);      // moe_route, moe_router_loss_terms, moe_aux_loss (and backwards)
// moe_permute, moe_combine, sigmoid_gate (and backwards)
void register_moe_permute(Backend& backend);
void register_grouped_matmul(Backend& backend);  // grouped_matmul, grouped_matmul_weight_grad

}  // namespace strata::cpu
