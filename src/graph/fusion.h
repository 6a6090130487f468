#pragma once
// Fusion passes over a complete graph (forward and backward, after autodiff
// and recomputation). They replace chains of ops by fused ops that compute the
// same values (ops/fused_ops.cpp: same formulas, same roundings) while
// reading the activations once. A value is fused away only when exactly one
// node reads it and it is not in `keep` (what the caller reads after a run:
// loss, logits, gradients); values nothing reads always survive.
#include <set>

#include "graph/rewrite.h"

namespace strata {

// add (residual) -> layernorm becomes add_layernorm, which also outputs the
// sum; a bf16 -> f32 cast feeding the add as its residual is absorbed.
// layernorm_backward -> add (gradient accumulation) becomes
// layernorm_backward_add, absorbing a bf16 -> f32 cast of its dy likewise.
// rms_norm and rms_norm_backward become add_rms_norm and
// rms_norm_backward_add the same way; add_rms_norm also absorbs an f32 ->
// bf16 cast that is y's only reader (attr y_dtype: y is stored once, in bf16).
GraphRewriter::Result fuse_residual_layernorm(const Graph& graph, const std::set<int>& keep = {});

// Trees of element-wise ops (add, scale, gelu, gelu_backward, cast) over f32
// and bf16 values whose intermediates have the tree's output shape become one
// fused_elementwise<n> node (at most 4 inputs, 12 instructions).
GraphRewriter::Result fuse_elementwise(const Graph& graph, const std::set<int>& keep = {});

// fuse_residual_layernorm, then fuse_elementwise; the value map spans both.
GraphRewriter::Result fuse_all(const Graph& graph, const std::set<int>& keep = {});

}  // namespace strata
