#pragma once
// What tells the mixture-of-experts families apart (moe_family.cpp runs them all): their HuggingFace
// names, where their MoE block's tensors live, the attention's q/k norms and biases, the shared expert.
#include <string>

#include "model/llama/llama_layers.h"

namespace strata {

struct MoeFlavour {
  std::string family;        // model.family and config.json's model_type
  std::string title;         // for messages: "Mixtral"
  std::string architecture;  // config.json's architectures[0]
  std::string block;         // the MoE block's module under a layer: "block_sparse_moe." or "mlp."
  // The experts' gate, up and down projections as the Hub names them under experts.{e}.
  std::string gate_proj, up_proj, down_proj;
  std::string experts_key;   // config.json's expert count: num_local_experts or num_experts
  std::string expert_width_key;  // config.json's expert hidden width: intermediate_size or moe_intermediate_size
  llama::AttentionStyle attention;
  bool qkv_bias = false;              // q, k and v always have biases (Qwen2-MoE: model.attention_bias must be true)
  bool always_norm_topk = false;      // Mixtral renormalises the top-k weights whatever the config says
  double rope_theta_default = 10000;  // where config.json has no rope_theta (MixtralConfig: 1e6)
  // Qwen's config.json also says which layers are sparse (decoder_sparse_step, mlp_only_layers), the
  // dense MLP's width (intermediate_size) and whether attention slides (use_sliding_window).
  bool qwen_layout = false;
  bool shared_expert = false;  // Qwen2-MoE: mlp.shared_expert (SwiGLU) behind mlp.shared_expert_gate's sigmoid
};

}  // namespace strata
