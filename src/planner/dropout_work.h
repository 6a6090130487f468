#pragma once
// Megatron-LM's dropout, which Strata's graph does not have (its trainer runs without), added to a layer's
// work when the run being planned for uses it (Megatron's defaults: attention and hidden dropout 0.1;
// Korthikanti et al. 2022 count its masks in a layer's activations, 34sbh + 5as^2b):
// - on the attention probabilities, with unfused attention only (a fused kernel drops inside, without
//   memory traffic): torch's dropout reads the probabilities and writes its output and a one-byte mask;
//   its backward reads the gradient and the mask and writes the gradient. Part of the attention core,
//   so selective recomputation redoes it.
// - on the two residual branches, fused into the residual add (Megatron's bias-dropout-add): the forward
//   writes only the mask beyond the add; the backward reads the gradient and the mask and writes the
//   branch's gradient. On the residual stream, so sequence parallelism splits it.
// Kept for backward: the masks, and the dropped probabilities where the attention core is not recomputed.
#include <cstdint>

#include "model/model_config.h"
#include "planner/workload.h"

namespace strata {

void add_dropout(SegmentWork& layer, const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp, DType dtype,
                 bool unfused_attention, SelectivePolicy selective);

}  // namespace strata
