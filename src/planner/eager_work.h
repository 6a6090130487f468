#pragma once
// A Llama layer as torchtitan runs it in eager PyTorch (no torch.compile), added to a layer's work when the run
// being planned for does (`--eager on`). Strata's graph prices RMSNorm, the rotary embedding and SwiGLU as one
// fused kernel each; torchtitan's Llama (torchtitan/models/norms.py RMSNorm, models/llama/model.py
// apply_rotary_emb and FeedForward, commit 9dec370 of its 2024-12 benchmarks) writes them as PyTorch ops, and
// eager PyTorch runs every op as its own kernel reading its inputs from memory and writing its output:
// - RMSNorm: x.float(), pow(2), mean, x * rsqrt(...), type_as(x), * weight, in fp32 between the casts; autograd
//   runs one derivative kernel per op back (and sums the two gradients of x).
// - rotary embedding of q and k: x.float(), a complex product with the frequencies, type_as(x).
// - SwiGLU: silu(gate), then * up; backward the product's two gradients and silu's.
// What this adds is the decomposition's memory traffic beyond the fused kernel's (its inputs read and output
// written once): as extra memory-bound ops beside the fused ones, forward and backward. A family whose layer has
// none of these ops (GPT-2: LayerNorm and GELU are single kernels in eager PyTorch too) gets nothing.
// Time only: the extra fp32 intermediates autograd keeps are not added to the activations, and the extra kernels'
// launches are not counted (microseconds against the milliseconds their traffic takes at training sizes).
#include <cstdint>

#include "model/model_config.h"
#include "planner/workload.h"

namespace strata {

// Bytes per element an eager decomposition moves beyond its fused kernel (the fused kernel's own traffic is
// already in the layer), forward and backward, with activations of `activation_bytes` each and fp32 inside.
struct EagerExtra {
  double forward = 0;
  double backward = 0;
};
EagerExtra eager_rms_norm_extra(double activation_bytes);
EagerExtra eager_rope_extra(double activation_bytes);
EagerExtra eager_swiglu_extra(double activation_bytes);

// Adds the three decompositions' extra traffic to a layer that has the fused ops (twice RMSNorm over the residual
// stream, the rotary embedding over q and k, SwiGLU over the MLP's width, tensor-parallel shapes).
void add_eager_elementwise(SegmentWork& layer, const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp,
                           DType dtype);

}  // namespace strata
