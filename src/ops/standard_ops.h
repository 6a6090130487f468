#pragma once
#include "ops/schema.h"

namespace strata {

// Registers every op Strata's models use; semantics are documented in
// src/ops/README.md and in each schema's summary.
void register_standard_ops(OpRegistry& registry);

// Op families defined in their own files (called by register_standard_ops).
void add_cast_ops(OpRegistry& registry);
void add_attention_parts_ops(OpRegistry& registry);  // split_heads, merge_heads, bmm, causal_softmax(_backward)
void add_collective_ops(OpRegistry& registry);  // all_reduce, copy_to_group, all_gather, reduce_scatter
void add_fused_ops(OpRegistry& registry);  // add_layernorm, layernorm_backward_add, fused_elementwise1..4

// The unfused fallbacks of `attention` and `attention_backward` (attention_parts_ops.cpp).
void decompose_attention(Dispatcher& dispatcher, const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);
void decompose_attention_backward(Dispatcher& dispatcher, const Tensors& inputs, const Tensors& outputs,
                                  const Attrs& attrs);

}  // namespace strata
