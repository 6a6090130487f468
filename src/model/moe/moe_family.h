#pragma once
// The mixture-of-experts families, as HuggingFace transformers computes them: LLaMA's attention
// (llama/llama_layers.h) and, in place of its MLP, a sparse MoE block: a router (nn.Linear to the
// experts, softmax, top-k, renormalised with norm_topk_prob), SwiGLU experts run as grouped GEMMs over
// stacked weights, and the weighted combine (ops/moe_ops.cpp).
// - "mixtral": MixtralForCausalLM (block_sparse_moe.gate, experts w1/w3/w2; the top-k always renormalised).
// - "qwen3_moe": Qwen3MoeForCausalLM (mlp.gate, experts gate_proj/up_proj/down_proj; RMSNorm on each
//   head of q and k before the rotary).
// - "qwen2_moe": Qwen2MoeForCausalLM (as Qwen3-MoE's names, biases on q/k/v, no q/k norms, and a shared
//   SwiGLU expert behind a sigmoid gate: mlp.shared_expert.*, mlp.shared_expert_gate).
// - "olmoe": OlmoeForCausalLM (as Qwen3-MoE's names; RMSNorm over all of q and all of k).
#include "model/family.h"

namespace strata {

const ModelFamily& mixtral_family();
const ModelFamily& qwen3_moe_family();
const ModelFamily& qwen2_moe_family();
const ModelFamily& olmoe_family();

}  // namespace strata
