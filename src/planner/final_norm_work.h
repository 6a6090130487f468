#pragma once
// The final norm run outside torch.compile (`strata plan --final-norm olmo-eager`): OLMo-core compiles each
// transformer block only (Transformer.apply_compile, src/olmo_core/nn/transformer/model.py at allenai/OLMo-core
// 41400c46f), so the model's last RMSNorm runs op by op in eager PyTorch (src/olmo_core/nn/layer_norm.py, RMSNorm with
// full_precision: x.float(), pow(2), mean, x * rsqrt(variance + eps), weight.type_as(x) * x, .to(og_dtype), all in
// fp32 between the casts), once a micro-batch, where Strata's graph prices one fused kernel. Priced as the
// decomposition's memory traffic beyond the fused kernel's, forward and backward (row-wise scalars and the weight's
// d elements left out):
// - forward: float() a+f, pow f+f, mean f, * rsqrt f+f, * weight f+f, .to() f+a: 2a + 9f a element, the fused kernel's
//   2a already priced;
// - backward (autograd's formulas, tools/autograd/derivatives.yaml and FunctionsManual.cpp pow_backward): .to() a+f,
//   * weight's input gradient 2f and weight gradient (product 3f, row sum f), * rsqrt's input gradient 2f and rsqrt's
//   gradient (product 3f, row sum f), mean's expand-and-divide f, pow's grad * (2 * x.pow(1)) 7f (three kernels), the
//   two gradients of x summed 3f, float() f+a: 2a + 25f, the fused kernel's 3a already priced.
// Time only: the fp32 intermediates autograd keeps are not added to the activations.
#include <cstdint>

#include "model/model_config.h"
#include "planner/workload.h"

namespace strata {

// How the run computes the model's final norm: in the compiled graph (one kernel, as Strata's), or as OLMo-core's
// RMSNorm in eager PyTorch.
enum class FinalNorm { Fused, OlmoEager };

// Bytes per element OLMo-core's eager RMSNorm moves beyond the fused kernel, with activations of `activation_bytes`.
struct FinalNormExtra {
  double forward = 0;
  double backward = 0;
};
FinalNormExtra olmo_eager_rms_norm_extra(double activation_bytes);

// Adds that traffic beside the head segment's final RMSNorm; nothing for FinalNorm::Fused. Fails naming the flag for a
// head without an RMSNorm.
void add_final_norm_work(SegmentWork& head, FinalNorm norm, const ModelConfig& config, int64_t micro_batch,
                         int64_t seq, DType dtype);

}  // namespace strata
