#pragma once
// The pieces of LLaMA's decoder layer that the families built on it share (llama/, moe/): RMSNorm,
// nn.Linear, rotary embedding, and the whole self-attention (q/k/v/o projections, rotary, grouped
// attention) with the q/k norms and biases of the families built on it, written once.
#include <string>
#include <vector>

#include "model/family.h"

namespace strata::llama {

// Where the q/k norms sit: none (LLaMA, Mixtral), an RMSNorm over each head's head_dim before the rotary
// (Qwen3: self_attn.q_norm and .k_norm, weight [head_dim]), or over all of q's and all of k's width
// (OLMoE: weights [H*D] and [KV*D]).
enum class QkNorm { None, PerHead, Whole };

// How a family's attention differs from LLaMA's: its q/k norms, and whether o_proj has a bias when the
// projections do (model.attention_bias; Qwen2-MoE biases q, k and v alone).
struct AttentionStyle {
  QkNorm qk_norm = QkNorm::None;
  bool o_proj_bias = true;
};

int rms_norm(ModelEmitter& e, const ModelConfig& config, int x, const std::string& name);
// nn.Linear: y = x W^T (+ b), W [out, in].
int linear(ModelEmitter& e, int x, const std::string& name, int64_t in, int64_t out, bool bias);
int rope(ModelEmitter& e, const ModelConfig& config, int x, int positions, const std::string& label);

// The attention sublayer of `prefix` on the normed h, its output projection included (the residual add
// is the caller's); it runs the heads the emitter's q and k projections hold.
int self_attention(ModelEmitter& e, const ModelConfig& config, int h, int positions, const std::string& prefix,
                   const AttentionStyle& style);

// input_layernorm, the self_attn projections (biases with attention_bias), the q/k norms,
// post_attention_layernorm: the specs of a layer's attention half, in the order LLaMA lists them.
void add_attention_specs(std::vector<ParamSpec>& specs, const ModelConfig& config, const std::string& prefix,
                         const AttentionStyle& style);
// A linear's specs: weight [out, in] normal(0, 0.02), and a zero bias.
void add_linear_specs(std::vector<ParamSpec>& specs, const std::string& name, int64_t out, int64_t in, bool bias);

// The embedding lookup and the LM head, tied to it or untied.
int embed(ModelEmitter& e, const ModelConfig& config, int tokens);
int lm_head(ModelEmitter& e, const ModelConfig& config, int normed);
// Megatron's split of the attention (q, k, v column-parallel, o row-parallel), the embedding and the
// LM head (vocabulary-parallel): the rules the families on LLaMA's attention share.
std::vector<ShardRule> attention_sharding_rules();
// The residual stream's ops (norms, residual adds, the final norm), as LLaMA's layers label them.
ResidualStream residual_stream();

// The attention keys' checks (heads, head size, kv heads, rotary): throws naming the model.* key.
void validate_attention(const ModelConfig& config);

}  // namespace strata::llama
