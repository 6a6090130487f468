#pragma once
// The loss as torchtitan computes it (`strata plan --loss eager-f32`), added to the head's work: its train.py
// (commit 9dec370 of the 2024-12 benchmarks) calls torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(),
// labels.flatten(0, 1)) outside torch.compile ("compiling loss function causes CUDA errors, turning off for now"), so
// eager PyTorch casts the logits to fp32 and runs log_softmax and nll_loss as kernels of their own:
// - forward: float() (logits read, fp32 written), log_softmax (fp32 read and written), nll_loss (one per row);
// - backward: nll_loss's gradient (a zeroed fp32 tensor of the logits' shape, one value per row scattered),
//   log_softmax's (its gradient and output read, its input's gradient written), float()'s (fp32 read, logits' dtype
//   written). fp32 logits are not cast.
// Strata's graph prices one fused cross-entropy kernel (the logits read forward; read and their gradient written
// backward); this adds the rest of the eager traffic, over the logits this device holds (the vocabulary split by
// tensor parallelism, as torchtitan's loss-parallel).
#include <cstdint>

#include "model/model_config.h"
#include "planner/workload.h"

namespace strata {

enum class LossKernel {
  Fused,     // one kernel over the logits (Strata's; llm-foundry's fused cross-entropy)
  EagerF32,  // torchtitan: the logits cast to fp32, then PyTorch's ops one by one
};
LossKernel parse_loss_kernel(const std::string& text, const std::string& what);

// Bytes per logit the eager fp32 loss moves beyond the fused kernel's, with logits of `logit_bytes` each.
struct LossExtra {
  double forward = 0;
  double backward = 0;
};
LossExtra eager_f32_loss_extra(double logit_bytes);

// Adds that traffic to a head whose graph has the fused cross-entropy.
void add_eager_f32_loss(SegmentWork& head, const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp,
                        DType dtype);

}  // namespace strata
