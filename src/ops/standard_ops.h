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
void add_fused_ops(OpRegistry& registry);  // add_layernorm, add_rms_norm, their *_backward_add, fused_elementwise1..4
void add_llama_ops(OpRegistry& registry);  // rms_norm(_backward), rope, swiglu(_backward)
void add_grouped_attention_ops(OpRegistry& registry);  // grouped_attention(_backward)
void add_reshape_op(OpRegistry& registry);

// reshape's output shape: x's first `keep` dims, then `tail` (throws naming the op unless the counts agree).
Shape reshaped(const Shape& shape, const Attrs& attrs);

// The unfused fallbacks of `attention` and `attention_backward` (attention_parts_ops.cpp).
void decompose_attention(Dispatcher& dispatcher, const Tensors& inputs, const Tensors& outputs, const Attrs& attrs);
void decompose_attention_backward(Dispatcher& dispatcher, const Tensors& inputs, const Tensors& outputs,
                                  const Attrs& attrs);
// The same for `grouped_attention` and `grouped_attention_backward`.
void decompose_grouped_attention(Dispatcher& dispatcher, const Tensors& inputs, const Tensors& outputs,
                                 const Attrs& attrs);
void decompose_grouped_attention_backward(Dispatcher& dispatcher, const Tensors& inputs, const Tensors& outputs,
                                          const Attrs& attrs);

}  // namespace strata
