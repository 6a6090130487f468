#pragma once
// GPT-2's layers written once: the embedding, the transformer block and the
// final norm with the tied LM head. The trainer's graph, the planner's
// per-device segments and the KV-cache sampler all build from these, so they
// train, price and sample the same model.
//
// The functions are written against an emitter E that turns each op into
// something: a graph node (GraphEmitter below) or an eager kernel call (the
// sampler's). An emitter provides
//   using Value = ...;
//   Value param(const std::string& name, const Shape& shape);   // this device's shard
//   Value op(const std::string& op, const std::vector<Value>& inputs, const Attrs& attrs,
//            const std::string& label);                         // the op's first output
//   Value attention(Value qkv, int64_t heads, const std::string& label);  // the causal attention core
// The tensor-parallel degree `tp` gives the shard shapes (Megatron's split):
// c_attn and c_fc by output columns, the two c_proj by input rows, attention
// by heads, the tied embedding by vocabulary rows (ceil(V / tp) per shard).
#include <string>

#include "model/gpt2_config.h"

namespace strata {

inline constexpr const char* kGPT2LayerPrefix = "transformer.h.";

inline std::string gpt2_layer_prefix(int64_t layer) { return kGPT2LayerPrefix + std::to_string(layer) + "."; }

inline int64_t gpt2_vocab_shard(const GPT2Config& config, int tp) { return (config.vocab_size + tp - 1) / tp; }

namespace gpt2_detail {

template <class E>
typename E::Value layernorm(E& e, const GPT2Config& config, typename E::Value x, const std::string& name) {
  return e.op("layernorm", {x, e.param(name + ".weight", {config.n_embd}), e.param(name + ".bias", {config.n_embd})},
              {{"eps", config.layer_norm_eps}}, name);
}

template <class E>
typename E::Value linear(E& e, typename E::Value x, const std::string& name, int64_t in, int64_t out) {
  return e.op("linear", {x, e.param(name + ".weight", {in, out}), e.param(name + ".bias", {out})}, {}, name);
}

}  // namespace gpt2_detail

// Token plus position embeddings of `tokens` [B, T] at `positions` [T].
template <class E>
typename E::Value gpt2_embed(E& e, const GPT2Config& config, typename E::Value tokens, typename E::Value positions,
                             int tp = 1) {
  auto wte = e.param("transformer.wte.weight", {gpt2_vocab_shard(config, tp), config.n_embd});
  auto wpe = e.param("transformer.wpe.weight", {config.block_size, config.n_embd});
  return e.op("add", {e.op("embedding", {wte, tokens}, {}, "wte"), e.op("embedding", {wpe, positions}, {}, "wpe")}, {},
              "embed");
}

// One transformer block; `prefix` names its parameters and labels its ops
// ("transformer.h.3." in the model, "" for the planner's stand-alone layer).
template <class E>
typename E::Value gpt2_block(E& e, const GPT2Config& config, typename E::Value x, const std::string& prefix,
                             int tp = 1) {
  using gpt2_detail::layernorm;
  using gpt2_detail::linear;
  const int64_t c = config.n_embd;
  auto qkv = linear(e, layernorm(e, config, x, prefix + "ln_1"), prefix + "attn.c_attn", c, 3 * c / tp);
  auto attended = e.attention(qkv, config.n_head / tp, prefix + "attn");
  x = e.op("add", {x, linear(e, attended, prefix + "attn.c_proj", c / tp, c)}, {}, prefix + "attn.residual");
  auto hidden = linear(e, layernorm(e, config, x, prefix + "ln_2"), prefix + "mlp.c_fc", c, 4 * c / tp);
  hidden = e.op("gelu", {hidden}, {}, prefix + "mlp.gelu");
  return e.op("add", {x, linear(e, hidden, prefix + "mlp.c_proj", 4 * c / tp, c)}, {}, prefix + "mlp.residual");
}

// The final LayerNorm.
template <class E>
typename E::Value gpt2_final_norm(E& e, const GPT2Config& config, typename E::Value x) {
  return gpt2_detail::layernorm(e, config, x, "transformer.ln_f");
}

// Logits of normed hidden states through the tied token embedding.
template <class E>
typename E::Value gpt2_lm_head(E& e, const GPT2Config& config, typename E::Value normed, int tp = 1) {
  auto wte = e.param("transformer.wte.weight", {gpt2_vocab_shard(config, tp), config.n_embd});
  return e.op("matmul", {normed, wte}, {{"trans_a", false}, {"trans_b", true}}, "lm_head");
}

}  // namespace strata
