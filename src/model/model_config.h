#pragma once
// A transformer's shape, for every family (model.family). The keys a family
// does not use keep their defaults, and its validation says so when one is set.
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace strata {

// Rotary frequency scaling (HuggingFace `rope_scaling` / `rope_parameters`).
struct RopeScaling {
  std::string type = "none";  // "none", "linear" or "llama3"
  double factor = 1;
  double low_freq_factor = 1;               // llama3
  double high_freq_factor = 4;              // llama3
  int64_t original_max_positions = 8192;    // llama3: original_max_position_embeddings
  bool operator==(const RopeScaling&) const = default;
};

struct ModelConfig {
  std::string family = "gpt2";  // "gpt2" or "llama" (model/family.h)
  int64_t n_layer = 6;
  int64_t n_head = 6;
  int64_t n_embd = 384;
  int64_t vocab_size = 4096;
  int64_t block_size = 256;  // the longest sequence trained on (GPT-2: also its position table's size)
  double layer_norm_eps = 1e-5;  // the norm's epsilon: GPT-2's LayerNorm, LLaMA's RMSNorm (rms_norm_eps)

  // LLaMA (HuggingFace LlamaConfig's names in comments).
  int64_t n_kv_head = 0;          // num_key_value_heads; 0: n_head
  int64_t head_dim = 0;           // head_dim; 0: n_embd / n_head
  int64_t intermediate_size = 0;  // the MLP's hidden width; 0: the family's default (GPT-2 4·n_embd)
  double rope_theta = 10000;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;  // what the checkpoint was made for; 0: block_size
  bool tie_word_embeddings = true;
  bool attention_bias = false;
  bool mlp_bias = false;

  // Mixture of experts (model/moe/: Mixtral's and Qwen-MoE's config.json names in comments).
  int64_t num_experts = 0;                      // num_local_experts / num_experts; 0: a dense model
  int64_t num_experts_per_tok = 0;              // the router's top-k
  int64_t moe_intermediate_size = 0;            // each expert's hidden width (Mixtral: intermediate_size)
  int64_t shared_expert_intermediate_size = 0;  // Qwen2-MoE's shared expert's width; 0: none
  bool norm_topk_prob = false;                  // the top-k weights renormalised to sum to 1
  double router_aux_loss_coef = 0;              // the load-balancing loss's weight in the training loss
  double router_z_loss_coef = 0;                // the router z-loss's weight (ST-MoE); 0: none
  double capacity_factor = 0;                   // rows per expert = ceil(factor * tokens * k / E); 0: dropless

  // Throws naming the `model.*` key that is impossible (the family's own checks too).
  void validate() const;
  int64_t kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t head_size() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
  int64_t num_parameters() const;  // a tied LM head counted once
  // Throws naming the first mixture-of-experts key set, for the dense families (`family` in the message).
  void expect_dense(const char* family_title) const;
  bool operator==(const ModelConfig&) const = default;
};

// The [model] keys of a config file ("n_layer", ...) and the fields they set: the one list of
// ModelConfig's fields. The trainer's and the planner's config readers, a HuggingFace model
// directory's adoption, the trainer's model comparison and the checkpoints' JSON all go through it.
struct ModelField {
  const char* key;
  std::variant<int64_t*, double*, std::string*, bool*> value;
  // Where model_config_json holds the field when not at "/<key>": the rope scaling is one object
  // there ("/rope_scaling/factor"), as checkpoints have always recorded it.
  const char* nested_pointer = nullptr;
  // Keys added after checkpoints existed (the mixture-of-experts ones) are written only when set, so a
  // model without them writes the JSON earlier checkpoints hold; a missing one reads as its default.
  bool written_only_when_set = false;

  std::string json_pointer() const { return nested_pointer ? std::string(nested_pointer) : std::string("/").append(key); }
};
std::vector<ModelField> model_fields(ModelConfig& config);

// Every field at its json_pointer, as checkpoints record the model.
nlohmann::json model_config_json(const ModelConfig& config);

}  // namespace strata
