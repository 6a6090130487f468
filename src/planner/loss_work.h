#pragma once
// The loss as a framework computes it outside its compiled or fused code (`strata plan --loss`), added to the head's
// work as the memory traffic of its kernels beyond the one fused cross-entropy kernel of Strata's graph (the logits
// read forward; read and their gradient written backward), over the logits this device holds (the vocabulary split
// by tensor parallelism). Per logit, with the logits in the compute dtype and f = 4 bytes (fp32):
//
// eager-f32, torchtitan's (train.py at commit 9dec370 of the 2024-12 benchmarks calls
// torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1)) outside torch.compile):
// - forward: float() (logits read, fp32 written), log_softmax (fp32 read and written), nll_loss (one per row);
// - backward: nll_loss's gradient (a zeroed fp32 tensor of the logits' shape, one value per row scattered),
//   log_softmax's (its gradient and output read, its input's gradient written), float()'s (fp32 read, logits' dtype
//   written).
//
// OLMo-core's two losses (allenai/OLMo-core at 41400c46f): the model casts its logits to fp32 (Transformer.forward:
// `self.w_out(h).float()`), the trainer copies the shifted logits (Trainer.get_losses: `logits[..., :-1, :]
// .contiguous()`, whose backward is PyTorch's slice_backward: a zeroed fp32 tensor, the gradient copied into it), and
// z-loss is on (z_loss_multiplier 1e-5 in every script), all outside torch.compile (only the blocks are compiled):
// - eager-f32-zloss, the scripts that leave fused_loss unset (nn/functional/cross_entropy_loss.py
//   cross_entropy_loss): F.cross_entropy as above, then z-loss's logits.logsumexp(-1), which PyTorch runs as amax
//   (f read), self - max (f read, f written), exp_ in place (f read and written) and sum (f read); backward
//   logsumexp_backward's grad * (self - result).exp() (three kernels, f read and f written each) and the two
//   gradients of the copied logits summed (2f read, f written);
// - triton-f32, the scripts with fused_loss=True (triton/cross_entropy_loss.py, flash-attn's Triton kernel): one
//   kernel forward (f read; z-loss from the same row's log-sum-exp) and one backward (f read, f written).
//
// Megatron's vocabulary-parallel cross-entropy (the loss of Megatron-LM and of Megatron-Core, which NeMo runs) on the
// logits cast to fp32 (fp16_lm_cross_entropy false, the default), two ways:
// - megatron-f32, without cross_entropy_loss_fusion (Megatron-Core's default; Megatron-LM of 2022, mpu/
//   cross_entropy.py at NVIDIA/Megatron-LM 35a3fa8b7c, the same ops): eager, one kernel each: float() (logits read,
//   f written), max (f read), sub_ (f read and written), exp out= in place (f read and written), sum (f read), div_ to
//   the softmax kept for backward (f read and written); backward the target's update (one value per row), mul_ by the
//   loss's gradient (f read and written), float()'s backward (f read, logits' dtype written);
// - megatron-f32-fused, with cross_entropy_loss_fusion (megatron/core/fusions/fused_cross_entropy.py at Megatron-Core
//   core_v0.9.0): the same ops in four functions under jit_fuser, which is torch.compile from PyTorch 2.2
//   (megatron/core/jit.py), each compiled alone, so what each returns is written: calculate_logits_max (logits read,
//   the f copy written, its max taken in the same pass), calculate_predicted_logits (f read; the shifted exp written
//   back over it, the sum taken in the same pass), calculate_cross_entropy_loss (div_: f read and written);
//   backward calculate_gradients (the softmax read, mul_'s result written back to it as a compiled in-place update,
//   f, and the gradient written in bf16).
// An fp32 dtype is not cast by float(); the copy's one row fewer per sequence is not counted.
#include <cstdint>
#include <string>

#include "model/model_config.h"
#include "planner/workload.h"

namespace strata {

enum class LossKernel {
  Fused,          // one kernel over the logits (Strata's; llm-foundry's fused cross-entropy)
  EagerF32,       // torchtitan: the logits cast to fp32, then PyTorch's ops one by one
  EagerF32ZLoss,  // OLMo-core without fused_loss: cast, shifted copy, cross-entropy and z-loss op by op
  TritonF32,      // OLMo-core with fused_loss: cast, shifted copy, flash-attn's Triton cross-entropy
  MegatronF32,       // Megatron's vocabulary-parallel cross-entropy on fp32 logits, op by op
  MegatronF32Fused,  // the same with cross_entropy_loss_fusion: four torch.compile'd functions
};
LossKernel parse_loss_kernel(const std::string& text, const std::string& what);

// Bytes per logit a loss moves beyond the fused kernel's, with logits of `logit_bytes` each (zero for Fused).
struct LossExtra {
  double forward = 0;
  double backward = 0;
};
LossExtra loss_extra(LossKernel loss, double logit_bytes);

// Adds that traffic to a head whose graph has the fused cross-entropy (nothing for Fused or a segment without it).
void add_loss_work(SegmentWork& head, LossKernel loss, const ModelConfig& config, int64_t micro_batch, int64_t seq,
                   int tp, DType dtype);

}  // namespace strata
