#pragma once
// Grouped-query attention through an SDPA without GQA (`strata plan --kv-repeat on`): k and v expanded to every
// query head before F.scaled_dot_product_attention, where Strata's graph runs one grouped kernel that reads the
// key/value heads as they are. OLMo-core's Attention on the path torch.compile takes (use_flash=False) calls
// repeat_interleave ("PyTorch's SDPA doesn't support GQA, so we have to do this", src/olmo_core/nn/attention.py at
// allenai/OLMo-core 41400c46f); torchtitan's Llama calls repeat_kv, unsqueeze + expand + reshape, whose reshape of
// the expanded view copies (torchtitan/models/llama/model.py at pytorch/torchtitan 9dec370, the same function at
// 1ea476e9f, 3faaa1a0 and 820504e's models/llama3/model.py). The expansion is memory traffic of its own:
// - inside a compiled block (Inductor cannot fuse into the attention kernel, so both expanded tensors are
//   materialised): forward k's expansion written by the kernel that produces k (q_width written instead of
//   kv_width), v's a copy (kv_width read, q_width written): 2 * q_width elements a row beyond the grouped kernel;
//   backward the attention gradient of k and v comes out per query head and is summed over each group, k's sum in
//   the backward of the kernel that produced k (q_width read instead of kv_width), v's a reduction (q_width read,
//   kv_width written): 2 * q_width elements a row again;
// - in eager PyTorch (`--eager on`) every op is a kernel of its own: forward a copy of k and of v (kv_width read,
//   q_width written each), backward the expand's gradient, a sum over the repeats (q_width read, kv_width written
//   each): 2 * (q_width + kv_width) elements a row each way.
// The expansion is redone by selective recomputation when the rotary embedding before it or the attention after it
// is (torchtitan's per-op policy saves only GEMM and attention outputs, so it redoes the copy that feeds SDPA).
// A model without grouping (kv heads = heads) gets nothing. Time only: the expanded k and v the attention keeps for
// its backward (q_width instead of kv_width each) are not added to the activations.
#include <cstdint>

#include "model/model_config.h"
#include "planner/workload.h"

namespace strata {

// Bytes the expansion moves beyond the grouped kernel's traffic, each way, for `rows` rows of a rank holding
// `q_width` query and `kv_width` key/value elements a row, activations of `activation_bytes`, run eagerly or
// compiled; 0 without grouping.
double kv_repeat_bytes(double rows, double q_width, double kv_width, double activation_bytes, bool eager);

// Adds the expansion's forward and backward traffic to a layer (tensor-parallel shapes: heads split over tp).
void add_kv_repeat(SegmentWork& layer, const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp,
                   DType dtype, bool eager);

}  // namespace strata
