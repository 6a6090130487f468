#pragma once
// The ref kernels, one registration function per family of ops.
#include "ops/backend.h"

namespace strata::ref {

void register_elementwise(Backend& backend);     // add, sum_to, scale, sum_squares, gelu, swiglu (and backwards)
void register_adamw(Backend& backend);
void register_embedding(Backend& backend);       // embedding, embedding_backward
void register_layernorm(Backend& backend);       // layernorm, layernorm_backward
void register_rms_norm(Backend& backend);        // rms_norm, rms_norm_backward
void register_rope(Backend& backend);
void register_matmul(Backend& backend);          // matmul, linear
void register_attention(Backend& backend);       // (grouped_)attention(_backward), attention_cached
void register_cross_entropy(Backend& backend);   // cross_entropy, cross_entropy_backward
void register_attention_parts(Backend& backend);  // split_heads, merge_heads, bmm, causal_softmax(_backward)
void register_fused(Backend& backend);           // add_layernorm, add_rms_norm, *_backward_add, fused_elementwise1..4

// moe_route, moe_router_loss_terms, moe_aux_loss, moe_permute, moe_combine, sigmoid_gate (and backwards)
void register_moe(Backend& backend);
void register_grouped_matmul(Backend& backend);  // grouped_matmul, grouped_matmul_weight_grad

}  // namespace strata::ref
