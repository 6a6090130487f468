#pragma once
// The opencl kernels, one registration function per family of ops (f32; OpenCL C compiled once
// per device, GEMMs on CLBlast). Kernels queue their work on the device the tensors live on and
// return without waiting.
#include "ops/backend.h"

namespace strata::opencl {

inline constexpr float kZeroFloat = 0.0f;

// Rows of a tensor whose leading dims are merged (its last dim is the row).
inline int64_t leading_rows(const Tensor& tensor) {
  return shape_numel(Shape(tensor.shape().begin(), tensor.shape().end() - 1));
}

// y = x converted to y's dtype (op cast), queued like a kernel.
void cast_on_device(const Tensor& x, const Tensor& y);

void register_matmul(Backend& backend);  // matmul, linear, bmm
void register_elementwise(Backend& backend);  // add, scale, gelu(_backward), cast, adamw(_with_copy), fused_elementwise1..4
void register_reductions(Backend& backend);  // sum_to, sum_squares, square_sum_exact
void register_norms(Backend& backend);        // the layernorm and rms_norm families, fused forms included
void register_rope_swiglu(Backend& backend);  // rope, swiglu(_backward)
void register_vocab(Backend& backend);        // embedding(_backward), cross_entropy(_backward), vocab shards too
void register_attention(Backend& backend);  // attention(_backward), grouped_attention(_backward), attention_cached
void register_attention_parts(Backend& backend);  // split_heads, merge_heads, causal_softmax(_backward)
// Emulated bf16 and f16 kernels for every op with an f32 kernel registered before and none of
// that dtype, through f32 copies on the device: call it last.
void register_through_f32(Backend& backend);

}  // namespace strata::opencl
