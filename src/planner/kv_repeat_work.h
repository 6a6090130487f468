#pragma once
// Grouped-query attention through an SDPA without GQA (`strata plan --kv-repeat on`): OLMo-core's Attention, on the
// path torch.compile takes (use_flash=False), expands k and v to every query head with repeat_interleave before
// F.scaled_dot_product_attention ("PyTorch's SDPA doesn't support GQA, so we have to do this",
// src/olmo_core/nn/attention.py at allenai/OLMo-core 41400c46f), where Strata's graph runs one grouped kernel that
// reads the key/value heads as they are. The expansion is memory traffic of its own, priced as it runs inside the
// compiled block (Inductor cannot fuse into the attention kernel, so both expanded tensors are materialised):
// - forward: k's expansion is written by the rotary kernel that produces k (q_width written instead of kv_width),
//   v's is a copy (kv_width read, q_width written): 2 * q_width elements a row beyond the grouped kernel;
// - backward: the attention gradient of k and v comes out per query head and is summed over each group, k's sum in
//   the rotary embedding's backward (q_width read instead of kv_width), v's a reduction (q_width read, kv_width
//   written): 2 * q_width elements a row again.
// A model without grouping (kv heads = heads) gets nothing. Time only: the expanded k and v the attention keeps for
// its backward (q_width instead of kv_width each) are not added to the activations.
#include <cstdint>

#include "model/model_config.h"
#include "planner/workload.h"

namespace strata {

// Bytes the expansion moves beyond the grouped kernel's traffic, each way, for `rows` rows of a rank holding
// `q_width` query and `kv_width` key/value elements a row, activations of `activation_bytes`; 0 without grouping.
double kv_repeat_bytes(double rows, double q_width, double kv_width, double activation_bytes);

// Adds the expansion's forward and backward traffic to a layer (tensor-parallel shapes: heads split over tp).
void add_kv_repeat(SegmentWork& layer, const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp,
                   DType dtype);

}  // namespace strata
