#pragma once
// The cpu kernels (f32), one registration function per family of ops.
#include "ops/backend.h"

namespace strata::cpu {

// Rows of a tensor whose leading dims are merged (its last dim is the row).
inline int64_t leading_rows(const Tensor& tensor) {
  return shape_numel(Shape(tensor.shape().begin(), tensor.shape().end() - 1));
}

void register_elementwise(Backend& backend);     // add, scale, gelu, gelu_backward
void register_reductions(Backend& backend);      // sum_to, sum_squares
void register_adamw(Backend& backend);
void register_embedding(Backend& backend);       // embedding, embedding_backward
void register_layernorm(Backend& backend);       // layernorm, layernorm_backward
void register_matmul(Backend& backend);          // matmul, linear
void register_attention(Backend& backend);       // attention, attention_cached
void register_attention_backward(Backend& backend);
void register_cross_entropy(Backend& backend);   // cross_entropy, cross_entropy_backward

}  // namespace strata::cpu
