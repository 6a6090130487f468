#pragma once
// Float8 linears in a bf16 (or fp16) run (`strata plan --fp8 RECIPE`): a layer's linears compute their three GEMMs
// (forward, the input's gradient and the weight's) on the device's float8 matrix engine ([device.fp8],
// hardware.h); everything else stays in the compute dtype: attention, the norms, the output head (Transformer
// Engine's layers in Megatron-Core leave the output layer to Megatron's own ColumnParallelLinear; torchtitan and
// OLMo-core exclude it from torchao's conversion) and a mixture's grouped expert GEMMs. What the float8 GEMMs
// cost besides their arithmetic is the casts of their operands, memory-bound kernels of their own:
// - every operand is scaled into fp8 and written twice, row-major and transposed: Hopper's fp8 GEMMs take both
//   operands K-major only ("TN", cuBLASLt's FP8 requirement), and each tensor is the reduction operand of one
//   GEMM along each of its two dimensions (the input in the forward and the weight gradient, the weight in the
//   forward and the input gradient, the output gradient in both backward GEMMs);
// - `Delayed` (Transformer Engine's DelayedScaling, Flax's fp8 dot): the scale comes from earlier steps' amax
//   history, so one kernel reads the tensor, writes both fp8 copies and records the amax (TE's cast-transpose);
//   the weights' fp8 copies are made once per step (the first micro-batch, or the optimizer with fp8
//   parameters) and reused by every micro-batch: not priced per micro-batch.
// - `Tensorwise` (torchao's dynamic tensorwise scaling, compiled): the scale needs this tensor's amax first, a
//   reduction reading it (TE's documentation of current scaling: two reads of the tensor), then the cast; the
//   weights are cast every forward, or, gathered by FSDP in fp8 with their scales computed after the optimizer
//   (`enable_fsdp_float8_all_gather`, `precompute_float8_dynamic_scale_for_fsdp`), arrive cast and are only
//   transposed.
// GEMMs reading one value (a Llama's q/k/v, gate/up) share its cast: Transformer Engine fuses them into one
// linear, torch.compile computes the same cast once. Memory is counted as in bf16 but for the gathered layers of an
// fp8 all-gather: the activations kept for backward (the fp8 copies torchao or TE keep instead of, or beside, the
// bf16 input) and the weights' own bytes (TE's fp8 parameters, its cached fp8 copies and transposes) are not changed.
#include <string>

#include "core/dtype.h"
#include "planner/workload.h"

namespace strata {

enum class Fp8Recipe {
  None,        // no float8 linears
  Delayed,     // Transformer Engine's delayed scaling (amax history)
  Tensorwise,  // torchao's dynamic tensorwise scaling (this tensor's amax)
};
Fp8Recipe parse_fp8_recipe(const std::string& text, const std::string& what);
const char* fp8_recipe_name(Fp8Recipe recipe);

// Bytes one cast of an element of `width` bytes moves into fp8 and its transposed fp8 copy.
double fp8_cast_bytes(Fp8Recipe recipe, double width);

// Makes the layer's linears' GEMMs float8 (OpWork::fp8, their operands' bytes fp8) and adds their casts, forward
// (inputs and weights) and backward (output gradients), for activations of `dtype`; `weights_gathered_in_fp8`:
// the weights arrive in fp8 from an all-gather.
void add_fp8_linears(SegmentWork& layer, Fp8Recipe recipe, DType dtype, bool weights_gathered_in_fp8);

// Elements of the weights of a layer's float8 linears (what an fp8 all-gather moves at one byte each).
double fp8_weight_elements(const SegmentWork& layer);
// Bytes per parameter of `params` gathered with `fp8_weights` of them in fp8 and the rest at `width`.
double fp8_gather_width(double params, double fp8_weights, double width);

}  // namespace strata
