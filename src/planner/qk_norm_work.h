#pragma once
// QK-norm (`strata plan --qk-norm on`): OLMo 2 normalises all of q and all of k after their projections, before the
// rotary embedding, with an RMSNorm over the whole projection each (allenai/OLMo-core src/olmo_core/nn/attention.py,
// Attention: `q_norm` over d_model, `k_norm` over n_kv_heads * head_dim; the OLMo 2 configs set `qk_norm`), which
// Strata's Llama layer has not. Priced as the layer's own RMSNorm is (its schema's traffic per element, its measured
// efficiency): two more norms forward and their two gradients backward, over the q and k widths this rank holds
// (heads split by tensor parallelism), redone by selective recomputation when the layer's norms are.
// Time only: the projections' outputs the norms' backward reads are not added to the activations kept, and under
// tensor parallelism the norm over the whole width needs each row's sum of squares from every rank (one fp32 value
// per row and norm), which is not priced.
#include "model/model_config.h"
#include "planner/workload.h"

namespace strata {

// Adds the q and k norms to a layer built with the model's RMSNorm (a Llama-family layer); fails naming the flag for
// a layer without one.
void add_qk_norm(SegmentWork& layer, const ModelConfig& config, int tp);

}  // namespace strata
